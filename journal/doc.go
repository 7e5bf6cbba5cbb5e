// Package journal keeps the durable record of one File batch run, so that a
// server's 429 restriction outlives the process that received it. Its rules
// live in docs/policy.md, each under its name ("The journal"); the run's
// files, formats and every case are in docs/policy.md, "The journal in
// detail". The godoc of each call says what it does.
//
// # A run
//
// A run is the journal of one batch: its plan (the digests of its files,
// never their IDs) and one chain of immutable records, backoff entries,
// receipts, part receipts and reviews, each one JSON envelope naming the
// digest of the record before it, under a head that names the last. The
// chain and the head are its only integrity mechanism. A run lives in a
// private local directory ([DirStore]) or in any other [Store] (the nested
// module's azure/blobjournal keeps one in a Blob container); any number of
// workers may share it, and runs never nest.
//
// # The calls, in the order a user meets them
//
// [Open] (a directory) or [OpenStore] creates a run or opens and verifies
// the one there ([Existing]: never create); [WithPlan] gives the batch's
// files, and [WithParallel](n) makes the run n shards, each an ordinary run
// with its own marker. A run that fails verification still opens, as
// unresolved, so that it can be reported.
//
// A *[Journal] implements [readrecovery.Journal]: attach it to the run's
// requests with [readrecovery.WithJournal], and mark the request that
// commits an upload with [WithUpload] and each part before it with
// [WithUploadPart]. The transport then calls [Journal.Admit] before any
// network access, [Journal.Begin] to claim the run's pending marker, and
// after the answer [Journal.Complete] (a receipt) or [Journal.Backoff] (a
// 429's backoff entry). Workers take files with [Journal.Next] until
// [ErrNoMoreFiles], and give back with [Journal.Release] a file whose
// upload did not begin.
//
// [Journal.Status] computes the run's state (clear, waiting, elapsed or
// unresolved) from UTC seconds, without sleeping: the caller decides.
// [Journal.PlanContinuation] and [Journal.RecordedPlan] class each planned
// file. An operator's review ([Journal.Review], [Journal.ReviewPending],
// [Journal.ReviewPendingMarker], [Journal.ReviewRestriction]) is the only
// way out of unknown, of a dead worker's marker and of an entry without
// timing. [InspectStore] verifies a run without changing it; package
// journalcmd is the operator's command for all of this.
//
// # Liveness
//
// Whether a marker's worker is alive comes from the store, never from a
// clock (docs/policy.md: marker-liveness): on a directory an flock (Unix)
// or LockFileEx (Windows), on Blob Storage a lease. The hold lives as long
// as its Journal: keep the Journal reachable while its request is in
// flight (the Transport does); a Journal garbage-collected mid-request
// drops its hold, and its marker then reads as dead. Where the store cannot
// tell (a file system whose locks fail with ENOLCK or EOPNOTSUPP, another
// OS), a marker reads as live, never as dead: nothing is released or handed
// out again on a guess, and a dead worker's marker blocks its run (or
// shard) until the operator, sure that no worker sends it, resolves it with
// [Journal.ReviewPending] (`journal review --pending`).
package journal
