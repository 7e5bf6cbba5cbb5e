// Package readrecovery is an http.RoundTripper decorator that recovers
// from HTTP 429 on reads, and only there, within hard bounds.
//
// The requests of one sequence (an index's readback, a checkpoint's reads,
// one File inventory) share a [Budget] in their context ([WithBudget]). A
// sequence has one wait window: a GET that meets 429 is re-sent once after
// the server-directed wait, a mutation's 429 goes back untouched and holds
// the sequence's other requests until its Retry-After, and a later 429
// stops the sequence. Waits are never shorter than the server asked and
// never longer than [MaxServerWait]; a sequence never lasts longer than
// [MaxSequenceTotal] nor sends more than [MaxSequenceRequests] requests. A
// request without a Budget gets no recovery: its 429 passes through
// untouched. Whoever retries it, a mutation that met 429 is never sent again
// as the same operation ([WithOperation]; docs/policy.md: repeat-guard).
// With [WithSharedRestrictions] a 429 restricts its scope for every sequence
// of the Transport, whose requests are held to the scope's room,
// not-before and pace ([AzureScope] gives Azure's scopes; docs/policy.md:
// shared-restriction, scope-room, paced-release); [WithCallerRetry] marks
// the attempts of a retry layer above the transport (docs/policy.md:
// caller-retry). [WithJournal] attaches the durable record of package
// journal. Every wait is a span,
// every stop an error matching [ErrSequenceStopped] and a field of
// [Budget.Report]. The zero [Transport] and the zero [Budget] are usable.
//
// docs/policy.md states every rule by name, why it is there and what you
// see; the README shows how to wire the transport into azcore and otelhttp.
//
// Example:
//
//	client := readrecovery.NewClient()
//	b := readrecovery.NewBudget("inventory")
//	ctx := readrecovery.WithBudget(ctx, b)
//	for url := first; url != ""; url = next(page) {
//		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
//		resp, err := client.Do(req) // every page shares b's one window
//		...
//	}
//	report := b.Report()
package readrecovery
