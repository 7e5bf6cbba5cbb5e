package integration

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/otelattr"
)

func blobSAS(cred *azblob.SharedKeyCredential, container, name string) (string, error) {
	q, err := sas.BlobSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().UTC().Add(time.Hour),
		Permissions:   (&sas.BlobPermissions{Read: true}).String(),
		ContainerName: container,
		BlobName:      name,
	}.SignWithSharedKey(cred)
	if err != nil {
		return "", err
	}
	return q.Encode(), nil
}

// TestTracesOverOTLP exports the transport's spans with the real OTLP/HTTP
// exporter and checks what a collector receives: one readrecovery.wait span
// per wait, child of the span in the request context, with the attributes
// of every-wait-is-a-span; a stop event on the request's span
// (stop-is-recorded); and no secret (SAS
// signature, shared-key Authorization, account key) in any exported byte.
func TestTracesOverOTLP(t *testing.T) {
	r := newRig(t, startAzurite(t))
	r.seed("source.json", []byte(`{"checkpoint":"source"}`))
	r.seed("sas.json", []byte(`{"checkpoint":"sas"}`))
	r.seed("stop.json", []byte(`{}`))
	r.script.
		Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(r.blobPath("source.json")), fakeserver.Times(1)).
		Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(r.blobPath("sas.json")), fakeserver.Times(1)).
		Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(r.blobPath("index.json")), fakeserver.Times(1)).
		Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterOverlong(60*time.Second)), fakeserver.MatchPath(r.blobPath("stop.json")))

	tp, rcv, flush := newTracing(t)
	tracer := tp.Tracer("integration")
	rec := newRecorder(nil)
	o := rrOptions(rec, nil, readrecovery.WithTracerProvider(tp))
	c := r.client(o)

	// A: a checkpoint read, GET 429 then 200 (read-429).
	ctxA, parentA := tracer.Start(context.Background(), "checkpoint.read")
	ctxA = readrecovery.WithBudget(ctxA, readrecovery.NewBudget("checkpoint source"))
	if _, err := download(ctxA, c, r.container, "source.json"); err != nil {
		t.Fatalf("A: %v", err)
	}
	parentA.End()

	// B: an upload whose PUT meets 429, then the readback (write-429).
	ctxB, parentB := tracer.Start(context.Background(), "index.provision")
	ctxB = readrecovery.WithBudget(ctxB, readrecovery.NewBudget("index provision"))
	if _, err := c.UploadBuffer(ctxB, r.container, "index.json", []byte(`{}`), nil); responseError(t, err).StatusCode != 429 {
		t.Fatalf("B upload: %v", err)
	}
	if _, err := download(ctxB, c, r.container, "index.json"); responseError(t, err).StatusCode != 404 {
		t.Fatalf("B readback: %v", err)
	}
	parentB.End()

	// C: a read with a SAS URL (sig= in the query), GET 429 then 200.
	ctxC, parentC := tracer.Start(context.Background(), "checkpoint.read.sas")
	ctxC = readrecovery.WithBudget(ctxC, readrecovery.NewBudget("checkpoint sas"))
	sasClient, err := blob.NewClientWithNoCredential(sasURL(t, r.proxyURL, r.container, "sas.json"), &blob.ClientOptions{ClientOptions: o})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sasClient.DownloadStream(ctxC, nil)
	if err != nil {
		t.Fatalf("C: %v", err)
	}
	resp.Body.Close()
	parentC.End()

	// D: an overlong Retry-After stops the sequence: no wait, a stop event.
	ctxD, parentD := tracer.Start(context.Background(), "checkpoint.read.stop")
	ctxD = readrecovery.WithBudget(ctxD, readrecovery.NewBudget("checkpoint stop"))
	if _, err := download(ctxD, c, r.container, "stop.json"); responseError(t, err).StatusCode != 429 {
		t.Fatalf("D: %v", err)
	}
	parentD.End()

	flush()
	spans := rcv.Spans(t)
	waits := byName(spans, otelattr.WaitSpanName)
	if len(waits) != 3 {
		t.Fatalf("%d %s spans exported, want 3 (A, B, C): %+v", len(waits), otelattr.WaitSpanName, waits)
	}

	proxy, _ := url.Parse(r.proxyURL)
	proxyPort, _ := strconv.Atoi(proxy.Port())
	led := r.ledger()
	idOf := func(method, path string) string { // the request ID of the first 429 of path
		for _, q := range led {
			if q.Method == method && q.Path == path && q.Status == 429 {
				return q.RequestID
			}
		}
		t.Fatalf("no 429 of %s %s in the ledger", method, path)
		return ""
	}
	for _, tc := range []struct {
		name     string
		seq      string
		trigger  string
		method   string
		path     string
		parentOf func() []span
	}{
		{name: "A", seq: "checkpoint source", trigger: "read-429", method: "GET", path: r.blobPath("source.json"),
			parentOf: func() []span { return childOf(waits, parentA) }},
		{name: "B", seq: "index provision", trigger: "write-429", method: "PUT", path: r.blobPath("index.json"),
			parentOf: func() []span { return childOf(waits, parentB) }},
		{name: "C", seq: "checkpoint sas", trigger: "read-429", method: "GET", path: r.blobPath("sas.json"),
			parentOf: func() []span { return childOf(waits, parentC) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.parentOf()
			if len(got) != 1 {
				t.Fatalf("%d wait spans with the right trace and parent, want 1", len(got))
			}
			w := got[0]
			if w.Kind != tracepb.Span_SPAN_KIND_INTERNAL || w.Scope != otelattr.ScopeName || w.Status == tracepb.Status_STATUS_CODE_ERROR {
				t.Fatalf("wait span kind %v scope %q status %v", w.Kind, w.Scope, w.Status)
			}
			if d := w.End.Sub(w.Start); d < retryAfter*9/10 || d > retryAfter+2*time.Second {
				t.Fatalf("wait span lasts %v, want about %v", d, retryAfter)
			}
			want := map[string]any{
				string(otelattr.SequenceName):           tc.seq,
				string(otelattr.WaitTrigger):            tc.trigger,
				string(otelattr.RetryAfterKind):         "seconds",
				string(otelattr.RetryAfterValue):        int64(1),
				string(otelattr.ServerDelaySeconds):     int64(1),
				string(otelattr.RequestID):              idOf(tc.method, tc.path),
				string(otelattr.HTTPRequestMethod):      "GET", // the request that waited
				string(otelattr.HTTPResponseStatusCode): int64(429),
				string(otelattr.ServerAddress):          proxy.Hostname(),
				string(otelattr.ServerPort):             int64(proxyPort),
				string(otelattr.URLFull):                r.proxyURL + tc.path, // no query, no userinfo
			}
			if tc.method != "GET" {
				// A readback waiting after a PUT's 429 says which method
				// met it.
				want[string(otelattr.WaitCauseMethod)] = tc.method
			} else {
				want[string(otelattr.HTTPRequestResendCount)] = int64(1)
			}
			for k, v := range want {
				if w.Attrs[k] != v {
					t.Errorf("attribute %s = %v (%T), want %v (%T)", k, w.Attrs[k], w.Attrs[k], v, v)
				}
			}
			if p, ok := w.Attrs[string(otelattr.WaitPlannedSeconds)].(float64); !ok || p <= 0 || p > 1 {
				t.Errorf("planned seconds %v, want in (0, 1]", w.Attrs[string(otelattr.WaitPlannedSeconds)])
			}
		})
	}

	// stop-is-recorded: the stop is an event on the request's span (parent D), and no
	// wait span was made for it.
	tidD, sidD := spanIDs(parentD)
	var stopEvents []spanEvent
	for _, s := range spans {
		if s.TraceID == tidD && s.SpanID == sidD {
			for _, e := range s.Events {
				if e.Name == otelattr.StopEventName {
					stopEvents = append(stopEvents, e)
				}
			}
		}
	}
	if len(stopEvents) != 1 || stopEvents[0].Attrs[string(otelattr.StopReason)] != string(readrecovery.StopOverlong) ||
		stopEvents[0].Attrs[string(otelattr.SequenceName)] != "checkpoint stop" {
		t.Fatalf("stop events on the request span: %+v", stopEvents)
	}
	if n := len(childOf(spans, parentD)); n != 0 {
		t.Fatalf("%d child spans under the stopped read, want none", n)
	}

	// nothing-secret-leaves: nothing secret in any exported byte. The recorder saw every
	// Authorization header and the SAS signature as they left for the
	// network.
	secrets := rec.Secrets()
	if len(secrets) < 3 {
		t.Fatalf("the recorder saw %d secrets, want the key, Authorization values and the SAS signature", len(secrets))
	}
	assertNoSecret(t, rcv.Raw(), secrets)
}

// TestOtelhttpComposition: readrecovery.New(otelhttp.NewTransport(base)).
// Each attempt is its own otelhttp client span; the wait span sits between
// them in time; all three are children of the caller's span.
func TestOtelhttpComposition(t *testing.T) {
	r := newRig(t, startAzurite(t))
	r.seed("source.json", []byte(`{"checkpoint":"source"}`))
	r.script.Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(r.blobPath("source.json")), fakeserver.Times(1))

	tp, rcv, flush := newTracing(t)
	rec := newRecorder(cleanhttp.DefaultPooledTransport())
	var o policy.ClientOptions
	// The README's wiring: readrecovery outside otelhttp.
	rrazure.Apply(&o, readrecovery.New(
		otelhttp.NewTransport(rec, otelhttp.WithTracerProvider(tp)),
		readrecovery.WithTracerProvider(tp)))
	c := r.client(o)

	ctx, parent := tp.Tracer("integration").Start(context.Background(), "checkpoint.read")
	ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("checkpoint otelhttp"))
	if _, err := download(ctx, c, r.container, "source.json"); err != nil {
		t.Fatal(err)
	}
	parent.End()
	flush()

	children := childOf(rcv.Spans(t), parent)
	var clients, waits []span
	for _, s := range children {
		switch {
		case s.Name == otelattr.WaitSpanName:
			waits = append(waits, s)
		case s.Kind == tracepb.Span_SPAN_KIND_CLIENT && s.Scope == otelhttp.ScopeName:
			clients = append(clients, s)
		default:
			t.Errorf("unexpected child span %q (%v, %s)", s.Name, s.Kind, s.Scope)
		}
	}
	if len(clients) != 2 || len(waits) != 1 {
		t.Fatalf("children of the caller's span: %d otelhttp client spans, %d wait spans; want 2 and 1", len(clients), len(waits))
	}
	if clients[1].Start.Before(clients[0].Start) {
		clients[0], clients[1] = clients[1], clients[0]
	}
	first, w, second := clients[0], waits[0], clients[1]
	if first.Attrs["http.response.status_code"] != int64(429) || second.Attrs["http.response.status_code"] != int64(200) {
		t.Fatalf("client span statuses %v then %v, want 429 then 200",
			first.Attrs["http.response.status_code"], second.Attrs["http.response.status_code"])
	}
	// first attempt ends (its 429 body closed) <= wait starts; wait ends <=
	// the re-send starts.
	if first.End.After(w.Start) || w.End.After(second.Start) {
		t.Fatalf("spans overlap: attempt 1 [%v, %v], wait [%v, %v], attempt 2 [%v, %v]",
			first.Start, first.End, w.Start, w.End, second.Start, second.End)
	}
	if d := w.End.Sub(w.Start); d < retryAfter*9/10 {
		t.Fatalf("wait span lasts %v, want about %v", d, retryAfter)
	}
	if second.Start.Sub(first.End) < retryAfter*9/10 {
		t.Fatalf("the re-send started %v after the first attempt ended, want at least the wait", second.Start.Sub(first.End))
	}
	if w.Attrs[string(otelattr.HTTPResponseStatusCode)] != int64(429) || w.Attrs[string(otelattr.WaitTrigger)] != "read-429" {
		t.Fatalf("wait attributes %v", w.Attrs)
	}
	if n := r.proxy.Count(fakeserver.RouteBlobGet, http.MethodGet); n != 2 {
		t.Fatalf("the proxy saw %d GETs, want 2", n)
	}
	assertNoSecret(t, rcv.Raw(), rec.Secrets())
}

// redactingExporter strips the query, userinfo and fragment from every
// span's url.full before its exporter sees it. otelhttp (v0.72.0) records
// url.full with the whole query, SAS signature included, and sets it after
// the span starts (so a SpanProcessor's OnStart cannot fix it);
// readrecovery's own spans never carry a query.
type redactingExporter struct{ sdktrace.SpanExporter }

func (e redactingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = redactedSpan{s}
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// redactedSpan is a ReadOnlySpan whose url.full has no query.
type redactedSpan struct{ sdktrace.ReadOnlySpan }

func (s redactedSpan) Attributes() []attribute.KeyValue {
	attrs := s.ReadOnlySpan.Attributes()
	out := make([]attribute.KeyValue, len(attrs))
	for i, kv := range attrs {
		if kv.Key == "url.full" {
			v := "REDACTED"
			if u, err := url.Parse(kv.Value.AsString()); err == nil {
				u.RawQuery, u.ForceQuery, u.User, u.Fragment, u.RawFragment = "", false, nil, "", ""
				v = u.String()
			}
			kv = attribute.String("url.full", v)
		}
		out[i] = kv
	}
	return out
}

// TestOtelhttpSAS: with a SAS URL, otelhttp's client spans carry the SAS
// signature in url.full, which readrecovery cannot prevent (otelhttp sits
// beneath it). An exporter wrapper that redacts url.full keeps it out of
// the export. If the first half fails, otelhttp has started to
// redact by itself and the README's warning can go.
func TestOtelhttpSAS(t *testing.T) {
	az := startAzurite(t)
	for _, tc := range []struct {
		name     string
		redact   bool
		wantLeak bool
	}{
		{"otelhttp alone exports the signature", false, true},
		{"with a url.full redacting exporter", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, az)
			r.seed("sas.json", []byte(`{"checkpoint":"sas"}`))
			r.script.Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(r.blobPath("sas.json")), fakeserver.Times(1))
			var wrap func(sdktrace.SpanExporter) sdktrace.SpanExporter
			if tc.redact {
				wrap = func(e sdktrace.SpanExporter) sdktrace.SpanExporter { return redactingExporter{e} }
			}
			tp, rcv, flush := newTracingWith(t, wrap)
			rec := newRecorder(nil)
			var o policy.ClientOptions
			rrazure.Apply(&o, readrecovery.New(otelhttp.NewTransport(rec, otelhttp.WithTracerProvider(tp)), readrecovery.WithTracerProvider(tp)))
			c, err := blob.NewClientWithNoCredential(sasURL(t, r.proxyURL, r.container, "sas.json"), &blob.ClientOptions{ClientOptions: o})
			if err != nil {
				t.Fatal(err)
			}
			ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("sas"))
			resp, err := c.DownloadStream(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			flush()
			spans := rcv.Spans(t)
			if n, m := len(byName(spans, otelattr.WaitSpanName)), len(spans); n != 1 || m != 3 {
				t.Fatalf("%d spans, %d of them wait spans; want 3 and 1", m, n)
			}
			for _, w := range byName(spans, otelattr.WaitSpanName) {
				if u, _ := w.Attrs[string(otelattr.URLFull)].(string); u != r.proxyURL+r.blobPath("sas.json") {
					t.Fatalf("wait span url.full %q", u)
				}
			}
			if !tc.wantLeak {
				assertNoSecret(t, rcv.Raw(), rec.Secrets())
				return
			}
			leaked := false
			for _, b := range rcv.Raw() {
				leaked = leaked || bytes.Contains(b, []byte("sig="))
			}
			if !leaked {
				t.Fatal("otelhttp no longer exports the SAS signature: drop redactURLFull from the README advice")
			}
		})
	}
}
