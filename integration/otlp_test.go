package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it accepts what the real
// exporter sends to /v1/traces, keeps the raw (decompressed) request bodies
// and decodes them as ExportTraceServiceRequest protobuf.
type otlpReceiver struct {
	*httptest.Server

	mu     sync.Mutex
	bodies [][]byte
	spans  []span
	errs   []string
}

// span is a decoded OTLP span.
type span struct {
	Name, Scope                   string
	TraceID, SpanID, ParentSpanID string
	Kind                          tracepb.Span_SpanKind
	Start, End                    time.Time
	Attrs                         map[string]any
	Events                        []spanEvent
	Status                        tracepb.Status_StatusCode
}

type spanEvent struct {
	Name  string
	Attrs map[string]any
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) fail(w http.ResponseWriter, status int, msg string) {
	r.mu.Lock()
	r.errs = append(r.errs, msg)
	r.mu.Unlock()
	http.Error(w, msg, status)
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.fail(w, http.StatusNotFound, "unexpected "+req.Method+" "+req.URL.Path)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		r.fail(w, http.StatusUnsupportedMediaType, "content type "+ct)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail(w, http.StatusBadRequest, "gzip: "+err.Error())
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		r.fail(w, http.StatusBadRequest, "read: "+err.Error())
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		r.fail(w, http.StatusBadRequest, "protobuf: "+err.Error())
		return
	}
	var spans []span
	for _, rs := range msg.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := span{
					Name: s.GetName(), Scope: ss.GetScope().GetName(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrs(s.GetAttributes()), Status: s.GetStatus().GetCode(),
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, spanEvent{Name: e.GetName(), Attrs: attrs(e.GetAttributes())})
				}
				spans = append(spans, sp)
			}
		}
	}
	r.mu.Lock()
	r.bodies = append(r.bodies, raw)
	r.spans = append(r.spans, spans...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.GetIntValue()
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.GetDoubleValue()
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.GetBoolValue()
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns the decoded spans, failing the test on any malformed
// export.
func (r *otlpReceiver) Spans(t testing.TB) []span {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		t.Fatalf("OTLP receiver refused exports: %v", r.errs)
	}
	return append([]span(nil), r.spans...)
}

// Raw returns every export body received, decompressed.
func (r *otlpReceiver) Raw() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...)
}

// newTracing returns a tracer provider that exports with the real
// otlptracehttp exporter (gzip, protobuf) to a new receiver. flush sends
// everything ended so far.
func newTracing(t *testing.T) (tp *sdktrace.TracerProvider, rcv *otlpReceiver, flush func()) {
	t.Helper()
	return newTracingWith(t, nil)
}

// newTracingWith is newTracing with the exporter wrapped by wrap (nil: as
// it is).
func newTracingWith(t *testing.T, wrap func(sdktrace.SpanExporter) sdktrace.SpanExporter) (tp *sdktrace.TracerProvider, rcv *otlpReceiver, flush func()) {
	t.Helper()
	rcv = newOTLPReceiver(t)
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(rcv.URL+"/v1/traces"),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
	)
	if err != nil {
		t.Fatal(err)
	}
	var se sdktrace.SpanExporter = exp
	if wrap != nil {
		se = wrap(exp)
	}
	tp = sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(se),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "readrecovery-integration"))),
	)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	flush = func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tp.ForceFlush(ctx); err != nil {
			t.Fatalf("flush spans: %v", err)
		}
	}
	return tp, rcv, flush
}

func spanIDs(s trace.Span) (traceID, spanID string) {
	sc := s.SpanContext()
	return sc.TraceID().String(), sc.SpanID().String()
}

func byName(spans []span, name string) []span {
	var out []span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// childOf returns the spans among spans whose parent is p.
func childOf(spans []span, p trace.Span) []span {
	tid, sid := spanIDs(p)
	var out []span
	for _, s := range spans {
		if s.TraceID == tid && s.ParentSpanID == sid {
			out = append(out, s)
		}
	}
	return out
}

// assertNoSecret fails when any export body holds any of secrets, or the
// tell-tale forms of a credential.
func assertNoSecret(t *testing.T, bodies [][]byte, secrets []string) {
	t.Helper()
	if len(bodies) == 0 {
		t.Fatal("no OTLP export received")
	}
	tells := []string{"SharedKey ", "sig="}
	for i, b := range bodies {
		for _, s := range secrets {
			if s != "" && bytes.Contains(b, []byte(s)) {
				t.Errorf("export %d holds a secret (%d bytes, starting %q...)", i, len(s), s[:min(4, len(s))])
			}
		}
		for _, s := range tells {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("export %d holds %q", i, s)
			}
		}
	}
}

// sasURL returns a read-only service SAS URL of a blob through base.
func sasURL(t *testing.T, base, container, blob string) string {
	t.Helper()
	cred, err := azblobSharedKey(azuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	q, err := blobSAS(cred, container, blob)
	if err != nil {
		t.Fatal(err)
	}
	u := base + "/" + azuriteAccount + "/" + container + "/" + blob + "?" + q
	if _, err := url.Parse(u); err != nil || !strings.Contains(u, "sig=") {
		t.Fatalf("SAS URL: %v", err)
	}
	return u
}
