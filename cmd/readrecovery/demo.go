package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/readrecovery/readrecovery/otelattr"
)

// runDemo runs the project's main job on the embedded fake server and
// prints its timeline, span tree and reports. It exits 0 only when every
// workflow ended as designed.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("readrecovery demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the run as JSON")
	otlp := fs.String("otlp", "", "also export the demo's spans over OTLP/HTTP (JSON) to this endpoint, e.g. http://localhost:4318")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: readrecovery demo [--json] [--otlp URL]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "readrecovery demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var exp sdktrace.SpanExporter
	if *otlp != "" {
		e, err := newOTLPExporter(*otlp)
		if err != nil {
			fmt.Fprintf(stderr, "readrecovery demo: %v\n", err)
			return 2
		}
		exp = e
	}
	run, err := runScenarios(ctx, false, exp)
	if err != nil {
		fmt.Fprintf(stderr, "readrecovery demo: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(run); err != nil {
			fmt.Fprintf(stderr, "readrecovery demo: %v\n", err)
			return 1
		}
	} else {
		run.print(stdout)
	}
	if !run.OK {
		return 1
	}
	return 0
}

// demoRun is everything the demo saw.
type demoRun struct {
	Server    string      `json:"server"`
	Workflows []*workflow `json:"workflows"`
	Spans     []*spanNode `json:"spans"`
	OK        bool        `json:"ok"`
	Seconds   float64     `json:"seconds"`
}

// workflow is one scenario: its timeline, its budget's report and the
// checks that say it ended as designed.
type workflow struct {
	Name    string               `json:"name"`
	Title   string               `json:"title"`
	Events  []event              `json:"events"`
	Report  *readrecovery.Report `json:"report,omitempty"`
	Checks  []check              `json:"checks"`
	OK      bool                 `json:"ok"`
	Journal json.RawMessage      `json:"journal_status,omitempty"`
}

// event is one line of the timeline: a request, a wait or a stop.
type event struct {
	At              float64 `json:"at"`
	Kind            string  `json:"kind"`
	Method          string  `json:"method,omitempty"`
	Path            string  `json:"path,omitempty"`
	Status          int     `json:"status,omitempty"`
	RequestID       string  `json:"request_id,omitempty"`
	RetryAfter      string  `json:"retry_after,omitempty"`
	Error           string  `json:"error,omitempty"`
	Trigger         string  `json:"trigger,omitempty"`
	RetryAfterKind  string  `json:"retry_after_kind,omitempty"`
	RetryAfterValue int64   `json:"retry_after_value,omitempty"`
	PlannedSeconds  float64 `json:"planned_seconds,omitempty"`
	ActualSeconds   float64 `json:"actual_seconds,omitempty"`
	Reason          string  `json:"reason,omitempty"`
}

type check struct {
	What string `json:"what"`
	OK   bool   `json:"ok"`
}

// spanNode is a span of the run with its children.
type spanNode struct {
	Name       string            `json:"name"`
	Seconds    float64           `json:"seconds"`
	Status     string            `json:"status,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Events     []string          `json:"events,omitempty"`
	Children   []*spanNode       `json:"children,omitempty"`
}

// recorder collects the timeline: requests from a logging transport under
// readrecovery, waits from ended spans, stops from the budgets.
type recorder struct {
	mu    sync.Mutex
	start time.Time
	cur   *workflow
	spans []sdktrace.ReadOnlySpan
}

func (r *recorder) add(e event) { r.addAt(e, time.Now()) }

// addAt adds an event that happened at t (a wait: when it began).
func (r *recorder) addAt(e event, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.At = round(t.Sub(r.start).Seconds())
	if r.cur != nil {
		r.cur.Events = append(r.cur.Events, e)
	}
}

// The recorder is a span processor: it keeps every span, and turns each
// ended wait span into a timeline event.
func (r *recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *recorder) Shutdown(context.Context) error                  { return nil }
func (r *recorder) ForceFlush(context.Context) error                { return nil }
func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	if s.Name() != otelattr.WaitSpanName {
		return
	}
	a := attrs(s.Attributes())
	e := event{
		Kind:           "wait",
		Trigger:        a[otelattr.WaitTrigger].AsString(),
		RetryAfterKind: a[otelattr.RetryAfterKind].AsString(),
		PlannedSeconds: a[otelattr.WaitPlannedSeconds].AsFloat64(),
		ActualSeconds:  s.EndTime().Sub(s.StartTime()).Seconds(),
		RequestID:      a[otelattr.RequestID].AsString(),
	}
	e.RetryAfterValue = a[otelattr.RetryAfterValue].AsInt64()
	if s.Status().Code.String() == "Error" {
		e.Error = s.Status().Description
	}
	r.addAt(e, s.StartTime())
}

func attrs(kv []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kv))
	for _, a := range kv {
		m[a.Key] = a.Value
	}
	return m
}

// loggingTransport records every attempt readrecovery sends.
type loggingTransport struct {
	base http.RoundTripper
	rec  *recorder
}

func (l *loggingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(req)
	e := event{Kind: "request", Method: req.Method, Path: req.URL.Path}
	if err != nil {
		e.Error = err.Error()
	} else {
		e.Status = resp.StatusCode
		e.RequestID = resp.Header.Get("x-ms-request-id")
		if v := resp.Header.Values("Retry-After"); len(v) > 0 {
			e.RetryAfter = strings.Join(v, " | ")
		}
	}
	l.rec.add(e)
	return resp, err
}

// demoEnv is what every scenario uses.
type demoEnv struct {
	srv    *fakeserver.Server
	url    string
	client *http.Client
	// shared is a client whose Transport shares restrictions
	// (WithSharedRestrictions) over the same logging base.
	shared *http.Client
	tracer trace.Tracer
	rec    *recorder
	run    *demoRun
}

// runScenarios starts the fake server and runs every workflow: over a
// loopback listener, or in-process (no sockets: tests run it inside a
// testing/synctest bubble, in fake time). A non-nil exp also receives
// every span; a failure to export them is the run's error.
func runScenarios(ctx context.Context, inProcess bool, exp sdktrace.SpanExporter) (*demoRun, error) {
	rec := &recorder{start: time.Now()}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(rec)}
	if exp != nil {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	defer tp.Shutdown(context.Background())

	srv := fakeserver.New()
	defer srv.Close()
	var base http.RoundTripper
	url := "http://fakeserver.invalid"
	if inProcess {
		base = srv.Transport()
	} else {
		var err error
		if url, err = srv.Start(); err != nil {
			return nil, fmt.Errorf("starting the fake server: %w", err)
		}
		pooled := cleanhttp.DefaultPooledTransport()
		defer pooled.CloseIdleConnections()
		base = pooled
	}
	client := &http.Client{
		Transport: readrecovery.New(&loggingTransport{base: base, rec: rec}, readrecovery.WithTracerProvider(tp)),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	shared := &http.Client{
		Transport: readrecovery.New(&loggingTransport{base: base, rec: rec}, readrecovery.WithTracerProvider(tp),
			readrecovery.WithSharedRestrictions(nil)),
		CheckRedirect: client.CheckRedirect,
	}
	env := &demoEnv{srv: srv, url: url, client: client, shared: shared, tracer: tp.Tracer("readrecovery-demo"), rec: rec,
		run: &demoRun{Server: url, OK: true}}
	for _, sc := range scenarios {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w := &workflow{Name: sc.name, Title: sc.title}
		rec.mu.Lock()
		rec.cur = w
		rec.mu.Unlock()
		wctx, span := env.tracer.Start(ctx, "demo."+sc.name)
		if err := sc.run(wctx, env, w); err != nil {
			w.Checks = append(w.Checks, check{What: "ran without error: " + err.Error(), OK: false})
		}
		span.End()
		w.OK = len(w.Checks) > 0
		for _, c := range w.Checks {
			w.OK = w.OK && c.OK
		}
		env.run.OK = env.run.OK && w.OK
		env.run.Workflows = append(env.run.Workflows, w)
	}
	rec.mu.Lock()
	rec.cur = nil
	env.run.Spans = spanTree(rec.spans, rec.start)
	rec.mu.Unlock()
	env.run.Seconds = time.Since(rec.start).Seconds()
	if exp != nil {
		if err := tp.ForceFlush(ctx); err != nil {
			return nil, err
		}
	}
	return env.run, nil
}

// scenario is one workflow of the demo.
type scenario struct {
	name, title string
	run         func(ctx context.Context, env *demoEnv, w *workflow) error
}

var scenarios = []scenario{
	{"search-readback", "Search index PUT meets a write 429; the readback GET waits first", searchReadback},
	{"file-inventory", "File inventory of 5 pages: a 429 on page 3 (one wait), another on page 5 (stop)", fileInventory},
	{"blob-checkpoint", "Blob checkpoint reads; a 429 with an RFC 850 date Retry-After", blobCheckpoint},
	{"mutation-429", "An upload meets 429: handed back, never re-sent", mutation429},
	{"queue-route", "A File upload marked for the queue-429 route: re-sent once, unchanged", queueRoute},
	{"file-batch", "A journaled File batch meets a 60 s Retry-After: it stops, and the run stays waiting across invocations", fileBatch},
	{"shared-restriction", "Two checkpoint sequences share a restriction: A meets 429, B waits until T without a 429 of its own", sharedRestriction},
}

// do sends one request in a span of its own, so a wait or a stop shows
// under the request that met it.
func (env *demoEnv) do(ctx context.Context, w *workflow, b *readrecovery.Budget, method, path string, body []byte) (*http.Response, error) {
	ctx, span := env.tracer.Start(ctx, method+" "+spanPath(path))
	defer span.End()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	target := path
	if !strings.HasPrefix(path, "http") {
		target = env.url + path
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	before := b.Report().Stop
	c := env.client
	if sharedFrom(ctx) {
		c = env.shared
	}
	resp, err := c.Do(req)
	if after := b.Report(); after.Stop != before {
		env.rec.add(event{Kind: "stop", Reason: string(after.Stop) + ": " + after.StopDetail})
	}
	if err != nil && errors.Is(err, readrecovery.ErrSequenceStopped) && before != "" {
		env.rec.add(event{Kind: "refused", Method: method, Path: pathOnly(path), Error: "sequence stopped: " + string(before)})
	}
	return resp, err
}

// spanPath is the path of a request target, without scheme, host or
// query.
func spanPath(target string) string {
	if i := strings.Index(target, "://"); i >= 0 {
		rest := target[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			target = rest[j:]
		}
	}
	return pathOnly(target)
}

func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

func closeBody(resp *http.Response) {
	if resp != nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func statusOf(resp *http.Response, err error) int {
	if err != nil || resp == nil {
		return 0
	}
	return resp.StatusCode
}

func (w *workflow) expect(what string, ok bool) {
	w.Checks = append(w.Checks, check{What: what, OK: ok})
}

func (w *workflow) keep(b *readrecovery.Budget) readrecovery.Report {
	r := b.Report()
	w.Report = &r
	return r
}

// searchReadback: an earlier, unacknowledged attempt left the index; this
// PUT meets 429 (handed back, never re-sent) and the readback GET waits the
// Retry-After before it is sent. The GET finds the index: observed, never
// owned, because the PUT got no ACK.
func searchReadback(ctx context.Context, env *demoEnv, w *workflow) error {
	def := []byte(`{"name":"hotels","fields":[{"name":"id","type":"Edm.String","key":true}]}`)
	if err := env.srv.PutIndex("hotels", def); err != nil {
		return err
	}
	env.srv.Script().Add(fakeserver.RouteSearchPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Nth(1))
	b := readrecovery.NewBudget("index hotels")
	ctx = readrecovery.WithBudget(ctx, b)
	resp, err := env.do(ctx, w, b, http.MethodPut, "/indexes/hotels?api-version=2024-07-01", def)
	closeBody(resp)
	w.expect("the PUT's 429 goes back to the caller", statusOf(resp, err) == 429)
	resp, err = env.do(ctx, w, b, http.MethodGet, "/indexes/hotels?api-version=2024-07-01", nil)
	closeBody(resp)
	w.expect("the readback GET answers 200", statusOf(resp, err) == 200)
	r := w.keep(b)
	w.expect("the PUT was sent exactly once", env.srv.Count(fakeserver.RouteSearchPut, http.MethodPut) == 1)
	w.expect("one wait, before the readback (write-429)", r.Waits == 1 && r.WaitLog[0].Trigger == otelattr.TriggerWrite429)
	w.expect("the GET reached the server at least 1 s after the 429", gapAtLeast(env.srv, fakeserver.RouteSearchPut, fakeserver.RouteSearchGet, time.Second))
	w.expect("ownership is observed, not owned (no ACK)", r.Ownership == readrecovery.Observed)
	return nil
}

// fileInventory: ten files listed two per page, every page in one budget.
func fileInventory(ctx context.Context, env *demoEnv, w *workflow) error {
	for i := range 10 {
		env.srv.AddFile(fmt.Sprintf("report-%02d.csv", i), []byte(fmt.Sprintf("row,%d\n", i)))
	}
	// File list ordinals: page 1, 2, 3 (429), 3 again, 4, 5 (429).
	env.srv.Script().
		Add(fakeserver.RouteFileList, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Nth(3)).
		Add(fakeserver.RouteFileList, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Nth(6))
	b := readrecovery.NewBudget("file inventory")
	ctx = readrecovery.WithBudget(ctx, b)
	next := "/files?limit=2"
	var pages []int
	for next != "" && len(pages) < 10 {
		resp, err := env.do(ctx, w, b, http.MethodGet, next, nil)
		if err != nil {
			pages = append(pages, 0)
			break
		}
		pages = append(pages, resp.StatusCode)
		var page struct {
			NextLink string `json:"nextLink"`
		}
		if resp.StatusCode == 200 {
			json.NewDecoder(resp.Body).Decode(&page)
		}
		closeBody(resp)
		next = page.NextLink
	}
	r := w.keep(b)
	w.expect("pages 1-4 answered 200, page 5's 429 handed back", fmt.Sprint(pages) == "[200 200 200 200 429]")
	w.expect("one wait for the whole inventory (read-429 on page 3)", r.Waits == 1 && r.WaitLog[0].Trigger == otelattr.TriggerRead429)
	w.expect("the second 429 stops the sequence (opportunity-used)", r.Stop == readrecovery.StopOpportunityUsed)
	w.expect("the server saw 6 list requests", env.srv.Count(fakeserver.RouteFileList, http.MethodGet) == 6)
	_, err := env.do(ctx, w, b, http.MethodGet, "/files?limit=2", nil)
	w.expect("a further page fails before network access", errors.Is(err, readrecovery.ErrSequenceStopped) && env.srv.Count(fakeserver.RouteFileList, http.MethodGet) == 6)
	return nil
}

// blobCheckpoint: the source object and the generated definition, read in
// one budget; the first read meets a 429 whose Retry-After is an RFC 850
// date 2 s ahead of the server's clock.
func blobCheckpoint(ctx context.Context, env *demoEnv, w *workflow) error {
	env.srv.PutBlob("checkpoints", "c1/source.json", []byte(`{"source":"files"}`))
	env.srv.PutBlob("checkpoints", "c1/definition.json", []byte(`{"indexer":"files"}`))
	env.srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterDate(fakeserver.RFC850, 2*time.Second)), fakeserver.Nth(1))
	b := readrecovery.NewBudget("checkpoint c1")
	ctx = readrecovery.WithBudget(ctx, b)
	resp, err := env.do(ctx, w, b, http.MethodGet, "/checkpoints/c1/source.json", nil)
	closeBody(resp)
	w.expect("the source read answers 200 after one wait", statusOf(resp, err) == 200)
	resp, err = env.do(ctx, w, b, http.MethodGet, "/checkpoints/c1/definition.json", nil)
	closeBody(resp)
	w.expect("the definition read answers 200", statusOf(resp, err) == 200)
	r := w.keep(b)
	w.expect("one wait, Retry-After kind date", r.Waits == 1 && r.WaitLog[0].RetryAfter.Kind == readrecovery.RetryAfterDate)
	w.expect("both reads kept with their ETags", len(r.SuccessfulReads) == 2 && r.SuccessfulReads[0].ETag != "" && r.SuccessfulReads[1].ETag != "")
	return nil
}

// mutation429: an upload without the queue mark meets 429: it is handed
// back untouched and never re-sent.
func mutation429(ctx context.Context, env *demoEnv, w *workflow) error {
	env.srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Times(1))
	before := env.srv.Count(fakeserver.RouteFileUpload, http.MethodPost)
	b := readrecovery.NewBudget("upload a.csv")
	ctx = readrecovery.WithBudget(ctx, b)
	resp, err := env.do(ctx, w, b, http.MethodPost, "/files", []byte("id,name\n1,a\n"))
	closeBody(resp)
	r := w.keep(b)
	w.expect("the upload's 429 goes back to the caller", statusOf(resp, err) == 429)
	w.expect("the upload was sent exactly once", env.srv.Count(fakeserver.RouteFileUpload, http.MethodPost)-before == 1)
	w.expect("no wait was taken for a mutation", r.Waits == 0)
	w.expect("no ACK: ownership unproven", r.Ownership == readrecovery.Unproven)
	return nil
}

// queueRoute: the one mutation the policy re-sends: a File upload marked
// with WithQueueRetry, once, unchanged, after its wait.
func queueRoute(ctx context.Context, env *demoEnv, w *workflow) error {
	env.srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Times(1))
	before := env.srv.Count(fakeserver.RouteFileUpload, http.MethodPost)
	b := readrecovery.NewBudget("upload b.csv")
	ctx = readrecovery.WithQueueRetry(readrecovery.WithBudget(ctx, b))
	resp, err := env.do(ctx, w, b, http.MethodPost, "/files", []byte("id,name\n2,b\n"))
	closeBody(resp)
	r := w.keep(b)
	w.expect("the re-sent upload answers 201", statusOf(resp, err) == 201)
	w.expect("the upload was sent twice: once, and its one re-send", env.srv.Count(fakeserver.RouteFileUpload, http.MethodPost)-before == 2)
	w.expect("one wait (queue-429)", r.Waits == 1 && r.WaitLog[0].Trigger == otelattr.TriggerQueue429)
	w.expect("the ACK is the re-send's: owned", r.Ownership == readrecovery.Owned && r.Mutation.Attempt == 2)
	return nil
}

// gapAtLeast reports whether the first request of route b came at least d
// after the first 429 of route a.
func gapAtLeast(srv *fakeserver.Server, a, b string, d time.Duration) bool {
	var t429 time.Time
	for _, r := range srv.Requests() {
		if r.Route == a && r.Status == 429 && t429.IsZero() {
			t429 = r.Arrived
		}
		if r.Route == b && !t429.IsZero() {
			return r.Arrived.Sub(t429) >= d
		}
	}
	return false
}

// spanTree arranges the run's spans by parent, in start order.
func spanTree(spans []sdktrace.ReadOnlySpan, start time.Time) []*spanNode {
	nodes := map[trace.SpanID]*spanNode{}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].StartTime().Before(spans[j].StartTime()) })
	for _, s := range spans {
		n := &spanNode{Name: s.Name(), Seconds: round(s.EndTime().Sub(s.StartTime()).Seconds())}
		if c := s.Status().Code.String(); c != "Unset" {
			n.Status = c
		}
		if s.Name() == otelattr.WaitSpanName {
			n.Attributes = map[string]string{}
			for _, a := range s.Attributes() {
				n.Attributes[string(a.Key)] = a.Value.String()
			}
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				if a.Key == otelattr.StopReason {
					n.Events = append(n.Events, e.Name+" "+a.Value.AsString())
				}
			}
		}
		nodes[s.SpanContext().SpanID()] = n
	}
	var roots []*spanNode
	for _, s := range spans {
		n := nodes[s.SpanContext().SpanID()]
		if p, ok := nodes[s.Parent().SpanID()]; ok && s.Parent().IsValid() {
			p.Children = append(p.Children, n)
		} else {
			roots = append(roots, n)
		}
	}
	return roots
}

func round(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// print writes the run for a person.
func (run *demoRun) print(out io.Writer) {
	fmt.Fprintf(out, "readrecovery demo: fake server at %s\n", run.Server)
	for i, w := range run.Workflows {
		fmt.Fprintf(out, "\n[%d] %s\n", i+1, w.Title)
		for _, e := range w.Events {
			fmt.Fprintf(out, "  +%6.3fs  %s\n", e.At, e.line())
		}
		if len(w.Journal) > 0 {
			fmt.Fprintf(out, "  journal status: %s\n", w.Journal)
		}
		for _, c := range w.Checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(out, "  %s %s\n", mark, c.What)
		}
	}
	fmt.Fprintf(out, "\nSpan tree:\n")
	for _, n := range run.Spans {
		n.print(out, "  ")
	}
	fmt.Fprintf(out, "\nReports:\n")
	for _, w := range run.Workflows {
		if w.Report == nil {
			continue
		}
		r := w.Report
		fmt.Fprintf(out, "  %s\n", r)
		for _, m := range r.Mutations {
			fmt.Fprintf(out, "      mutation #%d %s attempt %d: %s, %s\n", m.Request, m.Method, m.Attempt, statusOrError(m), m.Ownership)
		}
	}
	fmt.Fprint(out, glossary)
	verdict := "every workflow ended as designed"
	if !run.OK {
		verdict = "SOME WORKFLOW DID NOT END AS DESIGNED"
	}
	fmt.Fprintf(out, "\n%s (%.1f s)\n", verdict, run.Seconds)
}

func statusOrError(m readrecovery.MutationOutcome) string {
	if m.StatusCode == 0 {
		return "no response (" + m.Error + ")"
	}
	return strconv.Itoa(m.StatusCode)
}

// glossary explains the words the demo prints.
const glossary = `
What the words mean:
  read-429          a GET met 429: it is re-sent once, after the server's delay.
  write-429         a mutation (PUT, POST, ...) met 429: it goes back to the caller, never
                    re-sent; its delay holds the sequence's next requests, so the readback
                    GET waits first. Its wait span belongs to the GET that waited and names
                    the PUT in readrecovery.wait.cause_method.
  queue-429         a File upload marked for the queue route met 429: re-sent once, unchanged.
  window            the sequence's one wait: from its first 429 to the server's not-before
                    time; every request of the sequence sent meanwhile waits for its end.
  opportunity-used  a 429 came after the window: a sequence waits once, so it stops.
  shared-restriction
                    (WithSharedRestrictions) another sequence's 429 restricted the scope
                    (scheme and host) until its not-before time: this sequence waits until
                    then as its one window, without a 429 of its own.
  owned / observed / unproven
                    a mutation's own 2xx (owned); no 2xx but a later read found something
                    (observed: never a licence to clean up); neither (unproven).
`

func (e event) line() string {
	switch e.Kind {
	case "request":
		if e.Error != "" {
			return fmt.Sprintf("%-6s %-44s error: %s", e.Method, e.Path, e.Error)
		}
		s := fmt.Sprintf("%-6s %-44s %d  %s", e.Method, e.Path, e.Status, e.RequestID)
		if e.RetryAfter != "" {
			s += "  Retry-After: " + e.RetryAfter
		}
		return s
	case "wait":
		s := fmt.Sprintf("wait   %-9s Retry-After %s(%d)  planned %.3fs  actual %.3fs", e.Trigger, e.RetryAfterKind, e.RetryAfterValue, e.PlannedSeconds, e.ActualSeconds)
		if e.Trigger == otelattr.TriggerSharedRestriction {
			s += "  set by " + e.RequestID
		}
		if e.Error != "" {
			s += "  " + e.Error
		}
		return s
	case "stop":
		return "STOP   " + e.Reason
	default:
		return fmt.Sprintf("%-6s %-44s refused before network access (%s)", e.Method, e.Path, e.Error)
	}
}

func (n *spanNode) print(out io.Writer, indent string) {
	fmt.Fprintf(out, "%s%s (%.3fs)", indent, n.Name, n.Seconds)
	if n.Status != "" {
		fmt.Fprintf(out, " status=%s", n.Status)
	}
	if n.Attributes != nil {
		fmt.Fprintf(out, " trigger=%s kind=%s", n.Attributes[string(otelattr.WaitTrigger)], n.Attributes[string(otelattr.RetryAfterKind)])
	}
	for _, e := range n.Events {
		fmt.Fprintf(out, " [event %s]", e)
	}
	fmt.Fprintln(out)
	for _, c := range n.Children {
		c.print(out, indent+"  ")
	}
}

// fileBatch: a File batch of three uploads under a journal in a private
// run directory. The second upload meets a valid but overlong 60 s
// Retry-After: the batch stops at once (never shortened to 30 s), and the
// run's status, as "readrecovery journal status" prints it, stays waiting
// until the server's not-before time, for this process and the next.
func fileBatch(ctx context.Context, env *demoEnv, w *workflow) error {
	tmp, err := os.MkdirTemp("", "readrecovery-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "run")
	plan := []journal.PlannedFile{{ID: "q1.csv"}, {ID: "q2.csv"}, {ID: "q3.csv"}}
	j, err := journal.Open(dir, journal.WithPlan(plan))
	if err != nil {
		return err
	}
	env.srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterOverlong(60*time.Second)), fakeserver.Nth(2))
	before := env.srv.Count(fakeserver.RouteFileUpload, http.MethodPost)
	b := readrecovery.NewBudget("file batch")
	bctx := readrecovery.WithQueueRetry(readrecovery.WithJournal(readrecovery.WithBudget(ctx, b), j))
	var statuses []int
	for _, f := range plan {
		resp, err := env.do(journal.WithUpload(bctx, f.ID), w, b, http.MethodPost, "/files", []byte("content of "+f.ID))
		closeBody(resp)
		statuses = append(statuses, statusOf(resp, err))
	}
	r := w.keep(b)
	w.expect("q1 acknowledged, q2's 429 handed back, q3 refused before network access", fmt.Sprint(statuses) == "[201 429 0]")
	w.expect("no wait: a 60 s delay stops the batch, it is not shortened", r.Waits == 0 && r.Stop == readrecovery.StopOverlong)
	w.expect("the server saw two uploads", env.srv.Count(fakeserver.RouteFileUpload, http.MethodPost)-before == 2)

	// What the next invocation sees: the command, on the run directory.
	var out, errOut strings.Builder
	code := runJournal([]string{"status", dir}, &out, &errOut)
	w.Journal = json.RawMessage(strings.TrimSpace(out.String()))
	var st struct {
		FileBatch struct {
			Backoff struct {
				State     string `json:"state"`
				Delay     int64  `json:"server_delay_seconds"`
				Remaining int64  `json:"remaining_seconds"`
			} `json:"backoff"`
		} `json:"file_batch"`
	}
	json.Unmarshal([]byte(out.String()), &st)
	w.expect("readrecovery journal status exits 3: waiting", code == 3 && st.FileBatch.Backoff.State == "waiting")
	w.expect("the run stays blocked for the server's 60 s, not a new 30 s budget", st.FileBatch.Backoff.Delay == 60 && st.FileBatch.Backoff.Remaining > 30)
	c, err := j.PlanContinuation(plan, journal.NewApproval, time.Now())
	if err != nil {
		return err
	}
	w.expect("continuation: q1 acked, q2 unknown, q3 never-attempted; nothing may go now",
		c.Files[0].State == journal.FileAcked && c.Files[1].State == journal.FileUnknown &&
			c.Files[2].State == journal.FileNeverAttempted && len(c.Uploads()) == 0)
	return nil
}

// sharedKey marks a request for the demo's shared-restrictions client.
type sharedKey struct{}

func sharedFrom(ctx context.Context) bool { return ctx.Value(sharedKey{}) != nil }

// sharedRestriction: over a Transport made WithSharedRestrictions, two
// checkpoint sequences read the same account. A's read meets 429
// "Retry-After: 2": the scope (scheme and host) is restricted until T.
// B starts half a second later: it is not sent before T, it waits as its
// sequence's window (trigger shared-restriction, naming A's 429), and it
// is answered 200 at T without a 429 of its own. The server's ledger
// shows nothing between A's 429 and T.
func sharedRestriction(ctx context.Context, env *demoEnv, w *workflow) error {
	env.srv.PutBlob("checkpoints", "c2/source.json", []byte(`{"source":"files"}`))
	env.srv.PutBlob("checkpoints", "c2/definition.json", []byte(`{"indexer":"files"}`))
	env.srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(1))
	first := len(env.srv.Requests())
	ctx = context.WithValue(ctx, sharedKey{}, true)
	a, b := readrecovery.NewBudget("checkpoint c2 (A)"), readrecovery.NewBudget("checkpoint c2 (B)")
	var wg sync.WaitGroup
	var statusA, statusB int
	wg.Go(func() {
		resp, err := env.do(readrecovery.WithBudget(ctx, a), w, a, http.MethodGet, "/checkpoints/c2/source.json", nil)
		closeBody(resp)
		statusA = statusOf(resp, err)
	})
	wg.Go(func() {
		time.Sleep(500 * time.Millisecond)
		resp, err := env.do(readrecovery.WithBudget(ctx, b), w, b, http.MethodGet, "/checkpoints/c2/definition.json", nil)
		closeBody(resp)
		statusB = statusOf(resp, err)
	})
	wg.Wait()
	ledger := env.srv.Requests()[first:]
	w.expect("A's read answers 200 after its one wait", statusA == 200)
	w.expect("B's read answers 200", statusB == 200)
	// B's place in the release is T and A's the next (10 ms on), but which
	// of the two the server sees first is the schedulers' to say: the
	// check is that both came at T or later, each answered 200.
	ok := len(ledger) == 3 && ledger[0].Status == 429 && ledger[1].Status == 200 && ledger[2].Status == 200 &&
		ledger[1].Path != ledger[2].Path
	w.expect("the server saw 3 requests: A's 429, then B and A's re-send", ok)
	if ok {
		w.expect("nothing reached the server between A's 429 and T = +2 s",
			ledger[1].Arrived.Sub(ledger[0].Arrived) >= 2*time.Second && ledger[2].Arrived.Sub(ledger[0].Arrived) >= 2*time.Second)
	}
	r := w.keep(b)
	w.expect("B waited once (shared-restriction, naming A's 429) and met no 429",
		r.Waits == 1 && r.WaitLog[0].Trigger == otelattr.TriggerSharedRestriction && len(ledger) > 0 &&
			r.WaitLog[0].RequestID == ledger[0].RequestID && r.Requests == 1)
	return nil
}
