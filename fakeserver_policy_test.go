package readrecovery

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// The policy against every Retry-After form the bundled fake can send, in
// fake time over its in-process transport: the exact wait before the
// re-sent checkpoint read, or the exact stop without any wait (stop-not-shorten,
// strict-retry-after–stop-not-shorten). The fake writes the header bytes; the transport parses them;
// the fake's ledger says when the re-send arrived.
func TestPolicyAgainstEveryFakeRetryAfterForm(t *testing.T) {
	cases := []struct {
		name string
		ra   fakeserver.RetryAfter
		kind RetryAfterKind
		gap  time.Duration // the wait before the re-send; -1: no re-send
		stop StopReason
	}{
		{"seconds", fakeserver.RetryAfterSeconds(3), RetryAfterSeconds, 3 * time.Second, ""},
		{"seconds zero", fakeserver.RetryAfterSeconds(0), RetryAfterSeconds, 0, ""},
		{"imf-fixdate", fakeserver.RetryAfterDate(fakeserver.IMFFixdate, 4*time.Second), RetryAfterDate, 4 * time.Second, ""},
		{"rfc850", fakeserver.RetryAfterDate(fakeserver.RFC850, 5*time.Second), RetryAfterDate, 5 * time.Second, ""},
		{"asctime", fakeserver.RetryAfterDate(fakeserver.Asctime, 6*time.Second), RetryAfterDate, 6 * time.Second, ""},
		{"date in the past", fakeserver.RetryAfterDate(fakeserver.IMFFixdate, -time.Minute), RetryAfterDate, 0, ""},
		{"malformed", fakeserver.RetryAfterRaw("2.5"), RetryAfterInvalid, time.Second, ""},
		{"duplicate", fakeserver.RetryAfterRaw("1", "2"), RetryAfterInvalid, time.Second, ""},
		{"missing", fakeserver.RetryAfterMissing(), RetryAfterMissing, time.Second, ""},
		{"oversized", fakeserver.RetryAfterOversized(200), "", -1, StopOversized},
		{"overlong", fakeserver.RetryAfterOverlong(60 * time.Second), "", -1, StopOverlong},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakeserver.New()
				defer srv.Close()
				srv.PutBlob("checkpoints", "c1/source.json", []byte(`{"source":1}`))
				srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(tc.ra), fakeserver.Nth(1))
				b := NewBudget("checkpoint c1")
				req := get(t, WithBudget(context.Background(), b), "http://blob.example/checkpoints/c1/source.json")
				resp, err := New(srv.Transport()).RoundTrip(req)
				require.NoError(t, err)
				body := drain(resp)
				r := b.Report()
				if tc.gap < 0 {
					assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
					assert.Equal(t, 1, srv.Count(fakeserver.RouteBlobGet, http.MethodGet))
					assert.Equal(t, tc.stop, r.Stop)
					assert.Equal(t, 0, r.Waits)
					return
				}
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, `{"source":1}`, body)
				gap, err := srv.Gap(fakeserver.RouteBlobGet, 1)
				require.NoError(t, err)
				assert.Equal(t, tc.gap, gap)
				require.Len(t, r.WaitLog, 1)
				assert.Equal(t, tc.kind, r.WaitLog[0].RetryAfter.Kind)
				assert.Equal(t, StopReason(""), r.Stop)
				assert.Len(t, r.SuccessfulReads, 1)
				assert.NotEmpty(t, r.SuccessfulReads[0].ETag)
			})
		})
	}
}
