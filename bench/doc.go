// Package bench measures readrecovery against its peers and soaks it under
// load and faults. It is a nested module so that the peers (the Azure SDK's
// azcore, go-retryablehttp, failsafe-go) never reach the library's own
// go.mod.
//
// Everything lives in test files:
//
//   - impls_test.go: the contenders, each over its own go-cleanhttp pooled
//     transport, and how each peer's retry is configured to wait 0 when the
//     server says "Retry-After: 0": bare, rr-nobudget, rr-budget (a Budget
//     per sequence), retryablehttp, azcore, failsafe, and two for the bench
//     only, each run where it answers a question: rr-budget-each (a new
//     Budget per request; scenario 1 and own cost) and rr-drained
//     (scenarios 2 and 3). impls_check_test.go checks which benchmarks run
//     which contenders and the Budgets each one makes.
//   - drain_test.go: rr-drained's base transport, drain429, and its tests.
//     rr-drained is a control, not something readrecovery does: it reads a
//     429's body into memory before readrecovery closes it unread (R12),
//     so the connection goes back to the pool; the difference to rr-budget
//     is the re-dial R12 costs on HTTP/1.1.
//   - server_test.go: the loopback server of the benchmarks (httptest,
//     HTTP/1.1 keep-alive) and an in-process stub transport.
//   - transport_bench_test.go: scenario 1 (pass-through 200), scenario 2
//     (one 429 with Retry-After: 0, then 200) and the decorators' own cost
//     over the stub.
//   - concurrent_bench_test.go: scenario 3 (1,000 concurrent sequences of 10
//     pages, 429s injected at random): throughput, p50/p99, peak heap, new
//     connections per op.
//   - scenarios_bench_test.go: issue 14's scenarios: a recovered 429 over
//     HTTP/2 with TLS and with Retry-After: 1 (the re-dial's share), a
//     throttle burst of 200 sequences, goroutines per in-flight request,
//     the heap left by 200,000 finished sequences.
//   - slowserver_bench_test.go: scenario (s), a slow server that never
//     throttles (SPEC R98): bursts of 16 and 64 GETs, a Budget each,
//     answered after 1 s or 5 s, against bare, rr-shared and rr-azure;
//     TestSlowServerHarness checks the harness on a short burst.
//   - budget_heap_test.go: heap per live budget.
//   - retryafter_bench_test.go: Retry-After parsing next to net/http's
//     ParseTime and strconv.Atoi.
//   - soak_test.go, soak_concurrent_test.go: the soak against the
//     fakeserver (TestSoak, only with -soak or SOAK=1), serial and
//     concurrent sequences; soak_checks_test.go proves its checks on
//     ledgers made by hand (what a plain go test runs).
//
// The script run runs every benchmark with a count high enough for
// benchstat and writes REPORT.md (cmd/benchreport builds its tables);
// ci.sh runs go vet, the tests and the soak under the race detector.
package bench
