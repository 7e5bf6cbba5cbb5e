// Package journal keeps the durable record of one File batch run, so that a
// server's 429 restriction outlives the process that received it. Its rules
// live in docs/policy.md, each under its name ("The journal"); the run's
// files, formats and every case are in docs/policy.md, "The journal in
// detail". This documentation says which call does what and names, in
// parentheses after docs/policy.md, the rules each call keeps.
//
// # The run
//
// [Open](dir) creates a run in a private local directory ([DirStore]), or
// opens and verifies the one there; [OpenStore] does the same in any other
// [Store] (the nested module's azure/blobjournal keeps a run in a Blob
// container under a prefix); with [Existing] they never
// create (docs/policy.md: private-run-directory, shared-runs). [WithPlan]
// gives the batch's files; the run stores their digests ([PlannedFile.Digest]),
// never their IDs (docs/policy.md: plan-ids). A run that fails verification
// ([InspectStore]) still opens, as unresolved, so that it can be
// reported. Runs never nest: such an Open is refused, "runs never nest"
// (docs/policy.md: no-nesting).
//
// # The requests
//
// A *[Journal] implements [readrecovery.Journal]: attach it to the run's
// requests with [readrecovery.WithJournal], mark the request that commits
// an upload with [WithUpload] and each part before it (Blob Put Block,
// Files Create and Put Range) with [WithUploadPart] (docs/policy.md:
// parts-are-not-acks). The transport then calls, around each journaled
// request, [Journal.Admit] before any network access, [Journal.Begin] to
// claim the run's exclusive pending marker and check the run under it, and
// after the answer exactly one of [Journal.Complete] (a receipt) or
// [Journal.Backoff] (a 429's immutable backoff entry), each durable before
// the marker goes (docs/policy.md: journal-claim-then-check,
// immutable-chained-entries, every-mutation-journaled,
// crash-never-loses-restriction, persistence-failure-is-terminal,
// receipt-failure-keeps-ack, journal-slot-honours-deadline). Begin's errors
// say what they are (docs/policy.md: refusal-says-what-it-is,
// no-replay-of-unknown, bounded-journal: an error with a JournalFull method).
//
// # Many workers, and WithParallel
//
// Any number of workers may open the same run (on many machines when it is
// in Blob Storage); each Admit, Begin and PlanContinuation reads the store
// again, so a restriction one records blocks all, and [WithPendingWait]
// lets a worker wait for another worker's marker (docs/policy.md:
// shared-runs, in-flight). A run has one
// marker, so one journaled request in flight across all its workers; a
// run created [WithParallel](n) is n shards under a root, each an ordinary
// run with its own marker, so up to n are in flight, a file lives in one
// shard ([Journal.Shard]) and every rule holds per shard (docs/policy.md:
// parallel-shards). A Journal opened on a parallel run is its root: it
// holds no records of its own, sends each request to its file's shard
// (else its URL's), and its status is the shards' merged.
//
// [Journal.Next] hands the calling worker the next eligible file whose
// shard has no request in flight, claimed for it under the shard's marker,
// and [ErrNoMoreFiles] when none is left; [Journal.Release] gives back a
// file whose upload did not begin (docs/policy.md: next-hands-out-work).
//
// # Status and continuation
//
// [Journal.Status] computes the run's state, clear, waiting, elapsed or
// unresolved, from UTC seconds, without sleeping and without a monotonic
// deadline carried across processes; the caller decides (docs/policy.md:
// status-before-network, not-before-survives, representable-times).
// [Status.CommandJSON] gives its JSON, as `readrecovery journal status` prints
// it. [Journal.PlanContinuation] (with a new [Approval]) and
// [Journal.RecordedPlan] (from the run alone) class each planned file
// acked, never-attempted, unknown, reviewed or in-flight (docs/policy.md:
// upload-only-continuation, no-replay-of-unknown, in-flight).
//
// # Reviews
//
// An operator's review is the only way out of unknown, of a dead worker's
// marker and of an entry without timing: [Journal.Review] decides an unknown file
// (docs/policy.md: operator-review), [Journal.ReviewPending] and
// [Journal.ReviewPendingMarker] a dead worker's marker (docs/policy.md:
// pending-review, parallel-dead-worker), [Journal.ReviewRestriction] a
// backoff entry without timing (docs/policy.md: restriction-review). Each
// is an immutable record in the run's one chain, whose head names its last
// record (docs/policy.md: deletion-detected).
//
// # Records
//
// Every record of a run (backoff entry, receipt, part receipt, review) and
// its head is one envelope, one JSON line: {seq, kind, prev, body, digest}
// — its place in the run's one sequence, its kind, the name and digest of
// the record before it, the kind's own fields, and the digest of its own
// canonical bytes. The chain and the head are the only integrity
// mechanism (docs/policy.md: immutable-chained-entries, deletion-detected).
// An upload's head is written before its request is sent and stands for
// the record that fills its slot, so an upload's marker removed by hand is
// a finding, resolved by a pending review, never a way to make its file
// eligible.
//
// # Liveness
//
// Whether a marker's worker is alive comes from the store, never from a
// clock ([Store.Hold], [Store.Live]; docs/policy.md: marker-liveness): on a
// directory the worker holds an flock on its marker, which the kernel
// releases when the process dies; on Blob Storage a 15 s lease renewed
// every 5 s, which the service expires. A live marker is a request in
// flight however long it takes; a dead one leaves the run unresolved for
// every worker until a pending review, and a review of a live one is
// refused ("the marker's worker is alive"). On a file system without locks (flock fails with
// ENOLCK, EOPNOTSUPP, ENOSYS or EINVAL) a worker still sends, but every
// other process treats its marker as dead: keep parallel runs where locks
// work.
//
// The hold lives as long as its Journal: keep the Journal reachable while
// its request is in flight (the Transport does, through the request's
// context). A Journal garbage-collected mid-request closes the lock with
// its file, and its marker then reads as dead, as a dead worker's would.
//
// Nothing secret reaches a file (a URL is the digest of scheme://host/path,
// a note is sanitized), only regular files are read, and another worker's
// temporary file is never a finding (docs/policy.md: nothing-secret-leaves,
// hostile-directories, temporary-files-are-not-findings).
package journal
