package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `readrecovery demo --otlp URL` posts the demo's spans as OTLP/HTTP JSON to
// URL/v1/traces: every wait span under the span of the request that waited,
// its stop events, and nothing secret.
func TestDemoExportsOTLP(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	var paths, types []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		paths = append(paths, r.URL.Path)
		types = append(types, r.Header.Get("Content-Type"))
		mu.Unlock()
	}))
	defer recv.Close()
	var out, errOut bytes.Buffer
	code := runDemo(context.Background(), []string{"--otlp", recv.URL}, &out, &errOut)
	require.Equal(t, 0, code, "%s%s", errOut.String(), failedChecks(out.String()))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, bodies)
	type span struct {
		TraceID, SpanID, ParentSpanID, Name string
		Kind                                int
		Attributes                          []struct {
			Key   string
			Value map[string]any
		}
		Events []struct{ Name string }
		Status struct{ Code int }
	}
	var spans []span
	for i, b := range bodies {
		assert.Equal(t, "/v1/traces", paths[i])
		assert.Equal(t, "application/json", types[i])
		assert.NotContains(t, string(b), "sig=")
		var req struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []struct {
						Key   string
						Value map[string]any
					}
				}
				ScopeSpans []struct {
					Scope struct{ Name string }
					Spans []span
				}
			}
		}
		require.NoError(t, json.Unmarshal(b, &req))
		for _, rs := range req.ResourceSpans {
			assert.Equal(t, "service.name", rs.Resource.Attributes[0].Key)
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
	}
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	var waits, stops int
	for _, s := range spans {
		for _, ev := range s.Events {
			if ev.Name == "readrecovery.stop" {
				stops++
			}
		}
		if s.Name != "readrecovery.wait" {
			continue
		}
		waits++
		assert.Equal(t, 1, s.Kind, "internal")
		parent, ok := byID[s.ParentSpanID]
		require.True(t, ok, "the wait span's parent was exported")
		assert.True(t, strings.HasPrefix(parent.Name, "GET ") || strings.HasPrefix(parent.Name, "POST "), parent.Name)
		assert.Equal(t, parent.TraceID, s.TraceID)
		var trigger string
		for _, a := range s.Attributes {
			if a.Key == "readrecovery.wait.trigger" {
				trigger, _ = a.Value["stringValue"].(string)
			}
		}
		assert.Contains(t, []string{"read-429", "write-429", "queue-429", "shared-restriction", "scope-room"}, trigger)
		if trigger == "scope-room" {
			// At T the release hands B and A's re-send over 10 ms apart;
			// on a loaded machine the first's answer may take longer, and
			// the second then waits for the scope's room: a wait for the
			// process, not the server (scope-room), counted apart.
			waits--
		}
	}
	assert.Equal(t, 6, waits, "the demo's six waits for the server (two in shared-restriction)")
	assert.Equal(t, 2, stops, "the demo's two stops")
}

func TestDemoOTLPBadURL(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, runDemo(context.Background(), []string{"--otlp", "localhost:4318"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "wants an http(s) URL")
}

// failedChecks is the demo's output lines that report a failed check.
func failedChecks(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		if strings.Contains(line, "FAIL") {
			b.WriteString(line)
		}
	}
	return b.String()
}
