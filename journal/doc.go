// Package journal keeps the durable record of one File batch run, so that a
// server's 429 restriction outlives the process that received it
// (docs/policy.md: the journal's rules). A *Journal implements
// [readrecovery.Journal]: attach
// it to the run's requests with [readrecovery.WithJournal], mark each part
// of a multi-request upload with [WithUploadPart] (Blob Put Block, Files
// Create and Put Range) and the request that commits it with [WithUpload]
// (Put Block List, or the only request of a single-request upload).
//
// # On-disk layout
//
// A run is one private directory (mode 0700; every file 0600):
//
//	run.json                    the run manifest: {"backoff_version":"1.0","plan_digest":…,"created_at_utc":…,"digest":…}
//	plan.json                   the plan's sorted file digests: {"files":[…]}; its digest is plan_digest
//	pending-request.json        present only while a journaled request (or a review) is in flight
//	backoff-0001.json …         one immutable entry per 429, numbered from 0001 to 0200 without gaps
//	receipt-<32 hex>.json       one immutable commit receipt per attempted upload, named by its file identity digest
//	receipt-<32 hex>-r02.json … the commit receipt of a later upload round (after a reupload review)
//	part-<32 hex>-0001.json …   one immutable part receipt per part of a file's upload, numbered per file
//	review-0001.json …          one immutable review per operator decision, numbered without gaps
//	head-NNNN.json              the run's head: names the last record of the run's sequence
//
// plan.json, part and review files, and rounds after the first exist since
// the journal learnt multi-request uploads and reviews; a run written
// before (no plan.json, receipts without round, entries without "part")
// opens, verifies and takes new records unchanged.
//
// At most 200 entries and 1003 directory
// entries, whatever they are, at every instant: a request needs room for
// four (marker, entry or receipt, the new head and its temporary file), so
// Begin refuses with a *[FullError] (journal-full) — before any
// network access — a run holding 200 entries or more than 999 files. A new
// run (manifest, plan.json and the head) can thus hold 200 entries and 797
// receipts, part receipts and reviews.
//
// # Deletion
//
// Every record (backoff entries, commit receipts, part receipts, reviews)
// carries "run":{"seq":N,"previous":name,"previous_digest":…}: its place
// in the run's one chain of records, across kinds, and the name and digest
// of the record before it (run.json and the manifest's digest for record
// 1). head-NNNN.json names the last record by number, name and digest; it
// is written after the record and replaces the one before (the only file
// besides the marker that the journal removes). This chain and its head
// are the run's one integrity mechanism: no kind has a chain of its own.
// So removing any one record — the first, a middle one or the last of its
// kind, the run's last record included — or the head leaves a record that
// names a missing one, a head that names a missing record, or a last
// record without a head; an edited record fails its own digest and a
// reordered one the link of the record after it: [Inspect] names what is
// wrong and the run is unresolved (deletion-detected). A record without a
// "run" link is a finding in a 1.0 run (this project's earlier formats
// were never released and do not open); only a legacy run (below) holds
// records without one.
//
// What the digests do not protect against: they detect a crash, a
// truncated or edited file, a copied, reordered or single deleted file,
// not a forger. Nothing in a run is secret, so an editor with write access
// can recompute any digest: rewrite a record and every record after it,
// delete the last record together with its head and write the head of the
// one before, or remove a whole run. Keep the run where only its workers
// and operators can write (a private directory; a container with scoped
// credentials and, for Blob Storage, soft delete or versioning).
//
// # Formats
//
// Every file is one line of JSON produced by encoding/json from a struct
// with a fixed field order, plus "\n". The manifest, every record and the head end with
// "digest", its own digest (one name in every kind; a backoff entry's is
// the "event digest" a re-send and a review name): "sha256:"
// and the hex SHA-256 of the encoding of the same struct without the digest
// field; a loader re-encodes what it parsed and refuses any file that is not
// byte for byte that encoding (an edited, truncated, reformatted or
// duplicated-key file). An optional field ("part" of an entry's
// provenance, "round" of a receipt) is omitted at its zero value. A
// backoff entry:
//
//	{"backoff_version":"1.0","sequence":2,"plan_digest":"sha256:…",
//	 "method":"PUT","url_digest":"sha256:…",
//	 "request_id":"…","status":429,"retry_after":{"kind":"overlong","value":0},
//	 "timing":{"received_at_utc":1700000005,"not_before_utc":1700000065,"server_delay_seconds":60},
//	 "provenance":{"file_digest":"sha256:…","attempt":2,"resend_of":"sha256:…"},
//	 "run":{"seq":5,"previous":"receipt-….json","previous_digest":"sha256:…"},
//	 "digest":"sha256:…"}
//
// The entries are chained through the run's chain ("run"); sequence and
// the name's number count the entries alone (0001 without gaps). timing
// is null when no timing is known. url_digest is the digest of scheme://host/path: no query,
// no userinfo, no credential reaches a file (nothing-secret-leaves). A receipt records an
// upload's outcome: status, ack (true for a 2xx), sanitized request ID,
// ETag, attempt, resend_of and digest. Plans are stored only as
// digestOfPlan, files only as [FileDigest].
//
// A part receipt records a part's outcome: part number, method, URL digest, attempt,
// resend_of, status, accepted (2xx — never an ACK), request ID, ETag and
// digest. A review records review_version, sequence, plan_digest,
// file_digest, decision (reupload or skip), reviewer (the OS
// user), reviewed_at_utc, note (sanitized: printable, no URL query or
// userinfo, at most 256 bytes) and its evidence (the run's entry count and
// last event digest, the file's part count and last part digest, the
// digest of the file's commit receipt of the round), plus digest.
// Verify checks a review like an entry (canonical form, digest, numbering,
// run link, plan) and checks that its evidence is on disk and shows the file
// unknown: a review of an acked or never-attempted file is a finding.
//
// A manifest without backoff_version is a legacy run: its receipts remain
// evidence (without a "run" link: a legacy run's records have none), and
// any backoff file that is not a verifiable 1.0 entry is a legacy 429
// without timing, which makes the run unresolved. What the journal writes
// into a legacy run is linked into a chain whose genesis is the digest of
// the legacy manifest's bytes.
//
// # Durability
//
// The marker is written to its temporary file (O_EXCL), locked, fsynced
// and linked to pending-request.json (the link fails if a marker exists:
// [ErrPending]), then the directory is fsynced — before the request is
// sent; the file stays open, locked, until after the marker's removal
// (see Liveness). Begin claims the marker first and only then checks,
// under it, the status, the plan and the file's records (docs/policy.md: journal-claim-then-check), so that
// no other process can be authorised between a check and a send; a
// refusal found under the claim removes the marker again. An entry or receipt is written to a
// temporary file name.tmp-<16 random hex> (O_EXCL; a pattern only this
// write uses), fsynced and closed, hard-linked to its final name (the link fails if the
// name exists, so nothing is ever rewritten), the directory is fsynced, the
// temporary file removed and the directory fsynced again; only then is the
// marker removed and the directory fsynced. A crash at any step leaves
// either the entry or the marker, so a received restriction is never lost
// (crash-never-loses-restriction). Any failure of these steps is returned (a persistence failure,
// persistence-failure-is-terminal) and leaves the Journal unresolved until the run is opened again.
//
// A temporary file is never a record and never a finding: it is another
// worker's write in progress, which must not make a healthy run look
// unresolved to the processes that share it. Every write that makes one
// runs under the pending marker (or before the manifest exists), so a
// writer that died is seen by its marker; a temporary file older than a
// minute is listed apart by [Inspect] and `journal verify` as a leftover
// of an interrupted write.
//
// Every file is opened with O_NOFOLLOW|O_NONBLOCK and checked with fstat
// before it is read: a symbolic link, FIFO, device or directory under a
// journal name is a finding (the run is unresolved), and nothing can make a
// reader hang (hostile-directories). A directory (the run's, a shard's) is listed and
// fsynced through an open with O_DIRECTORY|O_NONBLOCK: a FIFO or device
// where a shard should be is a finding naming it, and where the run
// directory should be an error wrapping [ErrNotRun] ("is not a directory").
// A directory that holds files but no journal name is
// not a run ([ErrNotRun]): Open never writes into it.
//
// # Liveness
//
// Whether a marker's worker is alive comes from the store, never from a
// clock (docs/policy.md: marker-liveness, R83). While a journaled request
// is in flight its worker holds the marker live in a way the store itself
// can tell ([Store.Hold], [Store.Live]):
//
//	store                 live while                         dead                                  known dead
//	directory             the worker's flock on the marker   no lock: the kernel released it       at once (the next read)
//	Blob Storage          a 15 s lease, renewed every 5 s    no lease: expired by the service      within one lease (15 s)
//	no locks (ENOLCK …)   cannot tell                        treated as dead                       at once
//
// A live marker is a request in flight however long the request takes and
// whatever any worker's clock says: it is never judged abandoned, a
// pending review of it is refused ([ErrLive]) and writes nothing, and in a
// parallel run the other shards keep sending. A dead one is a worker that
// died in flight: the run is unresolved for every worker until the
// pending review below. A marker made by hand, a FIFO or a link under the
// marker's name holds no lock: dead. The hold lives as long as its
// Journal: keep the Journal reachable while its request is in flight (the
// Transport does, through the request's context); a Journal that is
// garbage-collected mid-request closes the lock with its file, and its
// marker then reads as dead, as a dead worker's would.
//
// On a file system that keeps no locks (flock(2) fails with ENOLCK,
// EOPNOTSUPP or ENOSYS: some network and FUSE file systems, platforms
// without flock) a worker still sends, but no other process can tell
// whether it lives: every other process treats its marker as a dead one
// (fail closed). A run without shards is unresolved by it as by any
// marker, and a Begin waits (WithPendingWait) for it to go; in a parallel
// run every other shard's Begin is refused while it exists, so keep
// parallel runs where locks work; `journal review --pending` of such a
// marker is accepted as the operator's word that no worker sends it.
//
// # The way out of an unresolved run
//
// A killed worker leaves its pending marker: the run is unresolved for
// every worker. Once the store shows the marker dead, an operator
// records `readrecovery journal review DIR --pending --note TEXT
// [--not-before UNIX]` ([Journal.ReviewPending]): an immutable review bound
// to the digest of the marker's bytes, which deletes or edits no record.
// That marker then blocks nothing (it is removed, conditionally), the file
// it names is unknown, and the run waits until the review time plus the
// 30 s wait ceiling — the lost response's restriction is unknown — or the
// later --not-before. Then `review --file ID --decision …` decides the
// file as usual. A review that fails to write leaves nothing that blocks:
// nothing is written, or its record is in the run and the next Admit,
// Begin or review finishes it (the head its writer would have written,
// then its marker, a review's, which sent nothing, or the one a pending
// review resolved, removed). A marker whose worker is live is refused
// ([ErrLive]).
//
// A backoff entry without timing (a Retry-After beyond the end of year
// 9999, an oversized field) leaves the run unresolved, since nobody knows
// how long the server asked to wait. An operator who knows records
// `readrecovery journal review DIR --restriction backoff-NNNN.json
// --not-before UNIX --note TEXT` ([Journal.ReviewRestriction]): an
// immutable review bound to the entry's event digest; the run then waits
// until that time (at least 30 s away). A run that fails verification has
// no review: its evidence cannot be trusted.
//
// # Nesting
//
// Runs never nest (no-nesting): [Open] and [OpenStore] refuse ([ErrNested])
// a directory inside a run or holding one, and a store prefix inside a run
// (a store that implements [Enclosing]) or listing another run's run.json.
//
// # States
//
// [Journal.Status] computes, without sleeping and without any monotonic
// deadline carried across processes: unresolved for any verification
// finding (see [Inspect]), a pending marker, an entry without usable timing
// (typed-only missing/invalid/overlong, unrepresentable, oversized), or a
// clock before a recorded received_at_utc; else clear with no entries;
// else waiting while now is before the greatest not_before_utc — a valid
// 60 s delay blocks for 60 s, not for a new 30 s budget — and elapsed after.
// [Journal.Admit] allows a request only when clear or elapsed. A run that
// fails verification opens anyway, as unresolved, so that it can be
// reported; it is never clear.
//
// # Continuation
//
// [Journal.PlanContinuation] classifies each planned file as acked (its
// commit's ACK on record: never sent again), unknown (attempted — a backoff
// entry, a part receipt, a commit receipt without ACK, the marker — and no
// ACK: never replayed), reviewed (an operator's [Journal.Review] of an
// unknown file: reupload makes it eligible as a never-attempted one, skip
// means never sent) or never-attempted (sent only under a new approval and
// while the status is clear or elapsed). A file's parts and commit are one
// upload: the Journal that began it may continue it (more parts, the
// commit, the queue-429 re-send); any other Journal — a later invocation,
// another process — is refused with [ErrReplay] until a review. The review
// is the only way out of unknown; it never makes a file acked, and a
// reupload is a new round whose records follow the review's evidence.
//
// # Refusals
//
// [Journal.Begin]'s errors say what they are (docs/policy.md: refusal-says-what-it-is): a refusal of the
// file wraps [readrecovery.ErrReplayRefused] ([ErrReplay],
// [ErrPlanMismatch]); a run that is waiting or unresolved, or another
// request's marker, is a *RestrictedError; a context that ended while
// waiting for this Journal's one in-flight slot returns the context's
// error (journal-slot-honours-deadline: the transport passes the sequence's deadline); anything else
// is a persistence failure.
//
// # Storage, and a batch across many workers
//
// The records live in a [Store] (docs/policy.md: shared-runs): exclusive create, read, list,
// and the conditional removal of the marker. [Open](dir) keeps a run in a
// local directory ([DirStore], the layout above). [OpenStore] opens a run
// in any other Store; the nested module's azure/blobjournal keeps it in a
// Blob Storage container under a prefix, every record created with
// If-None-Match: * and the marker deleted with If-Match on its ETag, in
// the same formats, each record checked by its own digest when read:
//
//	c, _ := container.NewClientFromConnectionString(cs, "runs", blobjournal.ClientOptions())
//	j, err := journal.OpenStore(ctx, blobjournal.New(c, "batch-42/"),
//		journal.WithPlan(files), journal.WithPendingWait(30*time.Second))
//
// Any number of worker processes may open the same run (shared-runs). Each Admit,
// Begin and PlanContinuation lists the store again, so a restriction one
// worker records blocks every worker before its next network access. The
// marker serializes their journaled requests (a run created [WithParallel]
// has one per shard: see Parallel runs): with [WithPendingWait] a
// worker waits (within its context) for another's marker to go; a marker
// whose lease has expired (see Liveness) is a worker that died in flight,
// and the run is unresolved for all, as it is for a directory. Receipts are
// checked under the claim, so no file is uploaded by two workers. The
// store's own requests never pass through the run's read-recovery
// transport (shared-runs): a failed create or delete, a 429 of the store included,
// is a persistence failure (persistence-failure-is-terminal). Every list
// and read of [OpenStore], [InspectStore], Admit, Begin (its check across
// shards included) and the reviews ends with the caller's context, and
// after 30 s at most; the journal's writes are never cut short by the
// caller (a half-written record is worse than a late one) and end only
// after their own 30 s.
//
// # Parallel runs
//
// A run created [WithParallel](n) (docs/policy.md: parallel-shards) lets up
// to n journaled requests be in flight at once across its workers. It is n
// ordinary runs, its shards, under a root:
//
//	run.json                    {"backoff_version":"1.0","plan_digest":…,"created_at_utc":…,"parallel":4,"digest":…}
//	plan.json                   the whole plan
//	shard-01/ … shard-04/       each a run of the layout above (Blob: names prefixed shard-NN/)
//
// Each shard's plan.json holds the files [Journal.Shard] maps to it (the
// first 8 bytes of the file digest's SHA-256, big-endian, modulo n, plus
// 1); a request that names no file (a journaled GET, a mutation without
// WithUpload) goes to the shard of its URL digest. Begin, Complete and
// Backoff of a request go to its shard (they must get the same context, as
// the transport gives them), so one Journal may have one request in flight
// per shard, and each request has the one exclusive marker of its shard:
// every guarantee of a run holds per shard, and no file is sent by two
// workers. Under each claim the request's own shard is read as in any run,
// and at the same time every other shard is listed and only what can
// restrict the request is read: its new backoff entries and reviews, and
// its marker's liveness, and its bytes when they changed (no receipt,
// part receipt or head). A restriction recorded in any shard thus blocks
// every request claimed after its entry is durable; up to n−1 requests
// claimed before it may still arrive. Admit of a request of a file decides
// from what this process read last (the Begin that follows reads again
// under its claim) and reads every shard only when that refuses; Admit of
// a request that names no file reads every shard. Status, PlanContinuation, RecordedPlan, Verify and
// Inspect read every shard in full — sequence and deletions included —
// and findings and reasons name the shard (shard-02/backoff-0003.json).
//
// Another worker's marker is a request in flight while its worker holds
// it (see Liveness). One whose worker is dead makes the run unresolved for
// every worker (docs/policy.md: parallel-dead-worker) until
// [Journal.ReviewPendingMarker] (`journal review DIR --pending --marker
// shard-03/pending-request.json`); the other shards keep sending until
// then. On a directory that is the next read after the death; on Blob
// Storage within one lease.
//
// The root's plan is written first, then each shard, and the root's
// manifest last: a root with a manifest has all its shards. A creation that
// stopped before the root's manifest sent nothing, and the next Open
// (WithParallel, the same plan or none) finishes it; workers that start
// together on a new run all open it, one of them linking the manifest. A
// shard missing under a root with a manifest was deleted whole: the run is
// unresolved, and the shard is not made again. A root whose manifest
// cannot be read is refused at open: its shards would be runs inside it.
//
// # Example
//
//	j, err := journal.Open(dir, journal.WithPlan(files))
//	if err != nil { … }
//	if st := j.Status(time.Now()); !st.Allows() {
//		return fmt.Errorf("run blocked: %s", st.Reason) // report and stop; never sleep
//	}
//	c, err := j.PlanContinuation(files, journal.NewApproval, time.Now())
//	for _, id := range c.Uploads() {
//		ctx := readrecovery.WithJournal(ctx, j)
//		for _, block := range blocks(id) {
//			… StageBlock(journal.WithUploadPart(ctx, id), …) …
//		}
//		… CommitBlockList(journal.WithUpload(ctx, id), …) …
//	}
//
// The command `readrecovery journal status DIR` prints the status as
// {"file_batch":{"backoff":{…}}}; `readrecovery journal verify DIR` lists the
// findings (names escaped) or says ok with the counts; `readrecovery
// journal plan DIR [--ids FILE]` prints every planned file's class (--json
// for JSON), with each ID beside its digest when FILE lists the planned IDs;
// `readrecovery journal review DIR --file ID --decision reupload|skip
// --note TEXT` records a review, and `review DIR --pending --note TEXT`
// resolves a dead marker.
package journal
