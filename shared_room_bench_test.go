package readrecovery

import (
	"context"
	"net/http"
	"testing"
)

// BenchmarkRoundTripShared is BenchmarkRoundTripPassThrough/budget with
// shared restrictions off and on (the room, the restriction table, the
// quota headers read): the own cost per request that shared restrictions
// add when nothing is throttled.
func BenchmarkRoundTripShared(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "https://acct.blob.core.windows.net/c/blob", nil)
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"on", []Option{WithSharedRestrictions(nil)}},
		{"on-azure-scope", []Option{WithSharedRestrictions(AzureScope)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt := New(newOK(), tc.opts...)
			var bud *Budget
			var r *http.Request
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if i%MaxSequenceRequests == 0 {
					bud = NewBudget("bench")
					r = req.WithContext(WithBudget(context.Background(), bud))
				}
				i++
				rt.RoundTrip(r)
			}
		})
	}
}
