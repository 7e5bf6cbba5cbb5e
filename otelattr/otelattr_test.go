package otelattr

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// The wait builder sets exactly the listed keys, with the
// semantic-convention names where they exist.
func TestWaitSetsExactlyTheListedKeys(t *testing.T) {
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range Wait(WaitInfo{
		Sequence: "s", Trigger: TriggerRead429, RetryAfterKind: "seconds", RetryAfterValue: 2,
		ServerDelaySeconds: 2, PlannedSeconds: 1.5, RequestID: "r", Method: "GET",
		StatusCode: 429, ServerAddress: "h:443", URL: "https://h:443/p",
	}) {
		if _, dup := got[kv.Key]; dup {
			t.Fatalf("key %s set twice", kv.Key)
		}
		got[kv.Key] = kv.Value
	}
	want := map[string]any{
		"readrecovery.sequence.name":                    "s",
		"readrecovery.wait.trigger":                     "read-429",
		"readrecovery.retry_after.kind":                 "seconds",
		"readrecovery.retry_after.value":                int64(2),
		"readrecovery.retry_after.server_delay_seconds": int64(2),
		"readrecovery.wait.planned_seconds":             1.5,
		"readrecovery.request_id":                       "r",
		"http.request.method":                           "GET",
		"http.response.status_code":                     int64(429),
		"server.address":                                "h:443",
		"url.full":                                      "https://h:443/p",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[attribute.Key(k)].AsInterface() != v {
			t.Errorf("%s = %v, want %v", k, got[attribute.Key(k)].AsInterface(), v)
		}
	}
}

// The stop builder sets the sequence, reason, detail and request count.
func TestStopSetsSequenceReasonDetailAndRequests(t *testing.T) {
	kv := Stop("s", "persistent-429", "detail", 3)
	want := []attribute.KeyValue{
		SequenceName.String("s"), StopReason.String("persistent-429"),
		StopDetail.String("detail"), SequenceRequests.Int(3),
	}
	if len(kv) != len(want) {
		t.Fatalf("got %v", kv)
	}
	for i := range want {
		if kv[i] != want[i] {
			t.Errorf("attribute %d = %v, want %v", i, kv[i], want[i])
		}
	}
}
