package bench

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/readrecovery/readrecovery"
)

// budgetRecorder is a base transport that notes the Budget in the context
// of every request that reaches it, then answers as the stub does.
type budgetRecorder struct {
	stub    *stubTransport
	budgets []*readrecovery.Budget
}

func (r *budgetRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.budgets = append(r.budgets, readrecovery.BudgetFrom(req.Context()))
	return r.stub.RoundTrip(req)
}

// TestBudgetPerRequest sends three requests in one sequence and counts the
// distinct Budgets the base transport saw: rr-budget shares the sequence's
// one, rr-budget-each makes one per request, rr-nobudget has none.
func TestBudgetPerRequest(t *testing.T) {
	cases := []struct {
		impl        string
		wantBudgets int // distinct non-nil Budgets over the three requests
		wantNil     int // requests without a Budget
	}{
		{"rr-nobudget", 0, 3},
		{"rr-budget", 1, 0},
		{"rr-budget-each", 3, 0},
		{"rr-drained", 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.impl, func(t *testing.T) {
			var spec *implSpec
			for i := range implSpecs {
				if implSpecs[i].name == tc.impl {
					spec = &implSpecs[i]
				}
			}
			if spec == nil {
				t.Fatalf("no contender %q", tc.impl)
			}
			rec := &budgetRecorder{stub: newStub()}
			im := spec.make(rec)
			ctx := im.sequence(context.Background())
			for range 3 {
				if st, err := im.do(ctx, "http://stub.invalid/ok"); err != nil || st != http.StatusOK {
					t.Fatalf("status %d, %v", st, err)
				}
			}
			distinct := map[*readrecovery.Budget]bool{}
			nils := 0
			for _, b := range rec.budgets {
				if b == nil {
					nils++
					continue
				}
				distinct[b] = true
			}
			if len(rec.budgets) != 3 || len(distinct) != tc.wantBudgets || nils != tc.wantNil {
				t.Errorf("%d requests, %d distinct Budgets, %d without; want 3, %d, %d",
					len(rec.budgets), len(distinct), nils, tc.wantBudgets, tc.wantNil)
			}
		})
	}
}

// TestSpecsOf checks which contenders each benchmark runs (before the
// benchmarks' own skips of rr-nobudget where nothing recovers): the
// bench-only variants only where they answer a question.
func TestSpecsOf(t *testing.T) {
	const six = "bare rr-nobudget rr-budget retryablehttp azcore failsafe"
	cases := []struct{ bench, want string }{
		{"BenchmarkPassThrough", "bare rr-nobudget rr-budget rr-budget-each retryablehttp azcore failsafe"},
		{"BenchmarkOwnCost", "bare rr-nobudget rr-budget rr-budget-each retryablehttp azcore failsafe"},
		{"BenchmarkRecovered429", "bare rr-nobudget rr-budget rr-drained retryablehttp azcore failsafe"},
		{"BenchmarkConcurrentSequences", "bare rr-nobudget rr-budget rr-drained rr-shared retryablehttp azcore failsafe"},
		{"BenchmarkRecovered429H2", six},
		{"BenchmarkRecovered429After1", six},
		{"BenchmarkThrottleBurst", "bare rr-nobudget rr-budget rr-shared retryablehttp azcore failsafe"},
		{"BenchmarkGoroutinesInFlight", six},
		{"BenchmarkFinishedSequences", six},
		{"BenchmarkTokenBucket", "bare rr-nobudget rr-budget rr-shared retryablehttp azcore failsafe"},
		{"BenchmarkServerBusy", "bare rr-nobudget rr-budget rr-shared retryablehttp azcore failsafe"},
		{"BenchmarkSubscriptions", "bare rr-nobudget rr-budget rr-shared rr-azure retryablehttp azcore failsafe"},
	}
	for _, tc := range cases {
		t.Run(tc.bench, func(t *testing.T) {
			var got []string
			for _, s := range specsOf(tc.bench) {
				got = append(got, s.name)
			}
			if want := strings.Fields(tc.want); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}
