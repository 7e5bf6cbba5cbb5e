// Package bench measures readrecovery against its peers and soaks it under
// load and faults. It is a nested module so that the peers (the Azure SDK's
// azcore, go-retryablehttp, failsafe-go) never reach the library's own
// go.mod.
//
// Everything lives in test files:
//
//   - impls_test.go: the contenders, each over its own go-cleanhttp pooled
//     transport, and how each peer's retry is configured to wait 0 when the
//     server says "Retry-After: 0".
//   - server_test.go: the loopback server of the benchmarks (httptest,
//     HTTP/1.1 keep-alive) and an in-process stub transport.
//   - transport_bench_test.go: scenario 1 (pass-through 200), scenario 2
//     (one 429 with Retry-After: 0, then 200) and the decorators' own cost
//     over the stub.
//   - concurrent_bench_test.go: scenario 3 (1,000 concurrent sequences of 10
//     pages, 429s injected at random): throughput, p50/p99, peak heap.
//   - budget_heap_test.go: heap per live budget.
//   - retryafter_bench_test.go: Retry-After parsing next to net/http's
//     ParseTime and strconv.Atoi.
//   - soak_test.go: the soak against the fakeserver (TestSoak).
//
// The script run runs every benchmark with a count high enough for
// benchstat and writes REPORT.md (cmd/benchreport builds its tables);
// ci.sh runs the soak and go vet.
package bench
