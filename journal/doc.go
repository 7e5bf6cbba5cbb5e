// Package journal keeps the durable record of one File batch run, so that a
// server's 429 restriction outlives the process that received it (SPEC
// R30–R40a). A *Journal implements [readrecovery.Journal]: attach it to the
// run's requests with [readrecovery.WithJournal], and mark each upload with
// [WithUpload].
//
// # On-disk layout
//
// A run is one private directory (mode 0700; every file 0600):
//
//	run.json               the run manifest: {"backoff_version":"1.0","plan_digest":…,"created_at_utc":…,"manifest_digest":…}
//	pending-request.json   present only while a journaled request is in flight
//	backoff-0001.json …    one immutable entry per 429, numbered from 0001 to 0200 without gaps
//	receipt-<32 hex>.json  one immutable receipt per attempted upload, named by its file identity digest
//
// At most [MaxEntries] (200) entries and [MaxFiles] (1003) directory
// entries, whatever they are, at every instant: a request needs room for
// three (marker, temporary file, entry or receipt), so Begin refuses with
// [ErrLimit] — before any network access — a run holding 200 entries or more
// than 1000 files. A manifest-only run can thus hold 200 entries and 800
// receipts.
//
// # Formats
//
// Every file is one line of JSON produced by encoding/json from a struct
// with a fixed field order, plus "\n". A record's own digest is "sha256:"
// and the hex SHA-256 of the encoding of the same struct without the digest
// field; a loader re-encodes what it parsed and refuses any file that is not
// byte for byte that encoding (an edited, truncated, reformatted or
// duplicated-key file). A backoff entry:
//
//	{"backoff_version":"1.0","sequence":2,"plan_digest":"sha256:…",
//	 "previous_digest":"sha256:…","method":"PUT","url_digest":"sha256:…",
//	 "request_id":"…","status":429,"retry_after":{"kind":"overlong","value":0},
//	 "timing":{"received_at_utc":1700000005,"not_before_utc":1700000065,"server_delay_seconds":60},
//	 "provenance":{"file_digest":"sha256:…","attempt":2,"resend_of":"sha256:…"},
//	 "event_digest":"sha256:…"}
//
// previous_digest chains the entries: entry 0001 names the manifest's own
// digest, every later one the event_digest of the one before, so a swapped,
// renamed or deleted middle entry breaks the chain. timing is null when no
// timing is known. url_digest is the digest of scheme://host/path: no query,
// no userinfo, no credential reaches a file (R27). A receipt records an
// upload's outcome: status, ack (true for a 2xx), sanitized request ID,
// ETag, attempt, resend_of and receipt_digest. Plans are stored only as
// [PlanDigest], files only as [FileDigest].
//
// A manifest without backoff_version is a legacy run: its receipts remain
// evidence, and any backoff file that is not a verifiable 1.0 entry is a
// legacy 429 without timing, which makes the run unresolved.
//
// # Durability
//
// The marker is created with O_EXCL (an existing one is [ErrPending]),
// written, fsynced and closed, then the directory is fsynced — before the
// request is sent. An entry or receipt is written to name.tmp (O_EXCL),
// fsynced and closed, hard-linked to its final name (the link fails if the
// name exists, so nothing is ever rewritten), the directory is fsynced, the
// temporary file removed and the directory fsynced again; only then is the
// marker removed and the directory fsynced. A crash at any step leaves
// either the entry or the marker, so a received restriction is never lost
// (R40). Any failure of these steps is returned (a persistence failure,
// R38) and leaves the Journal unresolved until the run is opened again.
//
// # States
//
// [Journal.Status] computes, without sleeping and without any monotonic
// deadline carried across processes: unresolved for any verification
// finding (see [Verify]), a pending marker, an entry without usable timing
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
// [Journal.PlanContinuation] classifies each planned file as acked (never
// sent again), unknown (attempted, no ACK: never replayed; ask for an
// operator's review) or never-attempted (sent only under a new approval and
// while the status is clear or elapsed).
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
//		ctx := journal.WithUpload(readrecovery.WithJournal(ctx, j), id)
//		… upload id with a client whose transport is readrecovery.New(…) …
//	}
//
// The command `readrecovery journal status DIR` prints the status as
// {"file_batch":{"backoff":{…}}}; `readrecovery journal verify DIR` lists the
// findings.
package journal
