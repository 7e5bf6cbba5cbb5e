package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpExporter sends spans to an OTLP/HTTP endpoint in the protocol's JSON
// encoding (POST {endpoint}/v1/traces, Content-Type application/json),
// which every OTLP receiver accepts: the OpenTelemetry Collector, Jaeger,
// Tempo. The demo writes it by hand so that the library's module keeps its
// few dependencies (the OTel exporter packages bring gRPC and protobuf).
type otlpExporter struct {
	endpoint string
	client   *http.Client
	service  string
}

// newOTLPExporter returns an exporter to endpoint: a base URL
// (http://localhost:4318) or the full traces URL (…/v1/traces).
func newOTLPExporter(endpoint string) (*otlpExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otlp wants an http(s) URL such as http://localhost:4318, not %q", endpoint)
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return &otlpExporter{endpoint: u.String(), client: &http.Client{Timeout: 10 * time.Second}, service: "readrecovery-demo"}, nil
}

// ExportSpans sends one request with every span.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := json.Marshal(e.request(spans))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("exporting spans: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("exporting spans: %s answered %s", e.endpoint, resp.Status)
	}
	return nil
}

// Shutdown has nothing to release.
func (e *otlpExporter) Shutdown(context.Context) error { return nil }

// The JSON shapes of ExportTraceServiceRequest (OTLP's protobuf JSON
// mapping: IDs in hex, 64-bit integers as strings, enums as numbers).
type (
	otlpRequest struct {
		ResourceSpans []otlpResourceSpans `json:"resourceSpans"`
	}
	otlpResourceSpans struct {
		Resource   otlpResource     `json:"resource"`
		ScopeSpans []otlpScopeSpans `json:"scopeSpans"`
	}
	otlpResource struct {
		Attributes []otlpKV `json:"attributes"`
	}
	otlpScopeSpans struct {
		Scope otlpScope  `json:"scope"`
		Spans []otlpSpan `json:"spans"`
	}
	otlpScope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	otlpSpan struct {
		TraceID      string      `json:"traceId"`
		SpanID       string      `json:"spanId"`
		ParentSpanID string      `json:"parentSpanId,omitempty"`
		Name         string      `json:"name"`
		Kind         int         `json:"kind"`
		Start        string      `json:"startTimeUnixNano"`
		End          string      `json:"endTimeUnixNano"`
		Attributes   []otlpKV    `json:"attributes,omitempty"`
		Events       []otlpEvent `json:"events,omitempty"`
		Status       otlpStatus  `json:"status"`
	}
	otlpEvent struct {
		Time       string   `json:"timeUnixNano"`
		Name       string   `json:"name"`
		Attributes []otlpKV `json:"attributes,omitempty"`
	}
	otlpStatus struct {
		Code    int    `json:"code,omitempty"`
		Message string `json:"message,omitempty"`
	}
	otlpKV struct {
		Key   string    `json:"key"`
		Value otlpValue `json:"value"`
	}
	otlpValue struct {
		String *string  `json:"stringValue,omitempty"`
		Int    *string  `json:"intValue,omitempty"`
		Double *float64 `json:"doubleValue,omitempty"`
		Bool   *bool    `json:"boolValue,omitempty"`
	}
)

func (e *otlpExporter) request(spans []sdktrace.ReadOnlySpan) otlpRequest {
	scopes := map[string]*otlpScopeSpans{}
	var order []string
	for _, s := range spans {
		name := s.InstrumentationScope().Name
		ss, ok := scopes[name]
		if !ok {
			ss = &otlpScopeSpans{Scope: otlpScope{Name: name, Version: s.InstrumentationScope().Version}}
			scopes[name] = ss
			order = append(order, name)
		}
		ss.Spans = append(ss.Spans, otlpSpanOf(s))
	}
	rs := otlpResourceSpans{Resource: otlpResource{Attributes: []otlpKV{kv(attribute.String("service.name", e.service))}}}
	for _, name := range order {
		rs.ScopeSpans = append(rs.ScopeSpans, *scopes[name])
	}
	return otlpRequest{ResourceSpans: []otlpResourceSpans{rs}}
}

func otlpSpanOf(s sdktrace.ReadOnlySpan) otlpSpan {
	sc := s.SpanContext()
	o := otlpSpan{
		TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(),
		Name: s.Name(), Kind: otlpKind(s.SpanKind()),
		Start: nanos(s.StartTime()), End: nanos(s.EndTime()),
		Attributes: kvs(s.Attributes()),
	}
	if p := s.Parent(); p.SpanID().IsValid() {
		o.ParentSpanID = p.SpanID().String()
	}
	for _, ev := range s.Events() {
		o.Events = append(o.Events, otlpEvent{Time: nanos(ev.Time), Name: ev.Name, Attributes: kvs(ev.Attributes)})
	}
	switch s.Status().Code {
	case codes.Ok:
		o.Status = otlpStatus{Code: 1}
	case codes.Error:
		o.Status = otlpStatus{Code: 2, Message: s.Status().Description}
	}
	return o
}

// otlpKind maps a span kind to OTLP's SpanKind enum.
func otlpKind(k trace.SpanKind) int {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	}
	return 0
}

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func kvs(attrs []attribute.KeyValue) []otlpKV {
	out := make([]otlpKV, 0, len(attrs))
	for _, a := range attrs {
		out = append(out, kv(a))
	}
	return out
}

func kv(a attribute.KeyValue) otlpKV {
	var v otlpValue
	switch a.Value.Type() {
	case attribute.BOOL:
		b := a.Value.AsBool()
		v.Bool = &b
	case attribute.INT64:
		s := strconv.FormatInt(a.Value.AsInt64(), 10)
		v.Int = &s
	case attribute.FLOAT64:
		f := a.Value.AsFloat64()
		v.Double = &f
	default:
		s := a.Value.String()
		v.String = &s
	}
	return otlpKV{Key: string(a.Key), Value: v}
}
