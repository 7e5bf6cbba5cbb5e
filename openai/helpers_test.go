package rropenai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// apiKey is the credential every test client sends; it must never appear
// in a span, a log record or an error.
const apiKey = "sk-test-SECRET-4f1c"

// baseURL is OpenAI's layout on the fake (served in-process: the host is
// never resolved).
const baseURL = "https://api.openai.test/v1/"

// env is one test's fake, readrecovery transport, openai-go client, span
// exporter and log.
type env struct {
	srv    *fakeserver.Server
	rt     *readrecovery.Transport
	client openai.Client
	spans  *tracetest.InMemoryExporter
	logs   *logBuffer
}

// newEnv builds an env; call it inside a synctest bubble when time
// matters (the fake, its clock and the transport's waits are the
// bubble's). opts are client options given before rropenai's.
func newEnv(t *testing.T, opts ...option.RequestOption) *env {
	t.Helper()
	e := &env{srv: fakeserver.New(), spans: tracetest.NewInMemoryExporter(), logs: &logBuffer{}}
	t.Cleanup(func() { _ = e.srv.Close() })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e.rt = readrecovery.New(e.srv.Transport(),
		readrecovery.WithTracerProvider(tp),
		readrecovery.WithLogger(slog.New(slog.NewJSONHandler(e.logs, nil))))
	all := append([]option.RequestOption{option.WithBaseURL(baseURL), option.WithAPIKey(apiKey)}, opts...)
	e.client = rropenai.NewClient(e.rt, all...)
	return e
}

// ledger returns the fake's requests of route, in order.
func (e *env) ledger(route string) []fakeserver.Request {
	var out []fakeserver.Request
	for _, r := range e.srv.Requests() {
		if route == "" || r.Route == route {
			out = append(out, r)
		}
	}
	return out
}

// gaps returns the times between successive arrivals.
func gaps(rs []fakeserver.Request) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(rs); i++ {
		out = append(out, rs[i].Arrived.Sub(rs[i-1].Arrived))
	}
	return out
}

// statusOf returns the HTTP status of an openai-go error, 0 for nil or
// another error.
func statusOf(err error) int {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

// logBuffer collects JSON log lines; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the log records as maps.
func (l *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// spanDump renders every exported span, its attributes and events, for
// secret checks.
func spanDump(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString(s.Name)
		for _, a := range s.Attributes {
			b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
		for _, ev := range s.Events {
			b.WriteString(" event:" + ev.Name)
			for _, a := range ev.Attributes {
				b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// attr returns the value of key among a span's attributes, "" if absent.
func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// named returns the spans called name.
func named(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
