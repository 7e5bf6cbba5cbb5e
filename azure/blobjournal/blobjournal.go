// Package blobjournal keeps a readrecovery journal run in Azure Blob Storage
// (docs/policy.md: shared-runs), so that the workers of one File batch on many machines
// share it and it outlives every one of them:
//
//	c, _ := container.NewClientWithSharedKeyCredential(url, cred, blobjournal.ClientOptions())
//	j, err := journal.OpenStore(ctx, blobjournal.New(c, "runs/batch-42/"),
//		journal.WithPlan(files), journal.WithPendingWait(30*time.Second))
//
// A run is the blobs under one prefix of one container, named as the files
// of a journal directory (run.json, plan.json, backoff-0001.json, …,
// pending-request.json). Every blob is created with If-None-Match: * (it
// never replaces one that exists) and carries the MD5 of its content for
// the service to check; the journal checks each record's own digest when it
// reads it, as on disk. The pending marker is deleted with If-Match on the
// ETag its creation returned (and its lease), so that a worker never
// deletes another's marker; while its request is in flight the worker
// holds a 15 s lease on it, renewed every 5 s ([Store.Hold]): a marker
// without a lease is a dead worker's ([Store.Live], R83), known within one
// lease by the service's own clock; the run's head (head-NNNN.json), the only other blob ever
// deleted, with If-Match on the ETag read just before, once a newer head
// replaced it. A prefix that lies inside another run's prefix is refused
// by journal.OpenStore ([Store.EnclosingRun]).
//
// The store's requests must not pass through the run's read-recovery
// transport (shared-runs): build the container client with [ClientOptions] (a
// plain pipeline: no readrecovery, no retry), never with
// rrazure.ClientOptions. A failed request, a 429 of the service included,
// is an [*Error] with the service's request ID; the journal treats a failed
// write as a persistence failure (persistence-failure-is-terminal): no wait, no re-send.
package blobjournal

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/readrecovery/readrecovery/journal"
)

// Store is a journal run in one container under one prefix. It implements
// [journal.Store]; it is safe for concurrent use.
type Store struct {
	c      *container.Client
	prefix string

	mu sync.Mutex
	// leases are the lease IDs of the markers this Store holds (Hold),
	// by name: Remove deletes a leased marker with its lease.
	leases map[string]string
}

var _ journal.Store = (*Store)(nil)

// New returns the run under prefix in the container of c ("" for the
// container's root; a prefix usually ends with "/"). Build c with
// [ClientOptions]. New sends nothing; [journal.OpenStore] creates or opens
// the run.
func New(c *container.Client, prefix string) *Store { return &Store{c: c, prefix: prefix} }

// ClientOptions returns the options for the store's container client: a
// pooled go-cleanhttp transport of its own and no retry, so that neither
// readrecovery nor azcore re-sends a conditional request whose first
// attempt may have succeeded (a retried create would find its own blob and
// fail). The caller adds its own telemetry or logging options.
func ClientOptions() *container.ClientOptions {
	return &container.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport: &http.Client{Transport: cleanhttp.DefaultPooledTransport()},
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}}
}

// String names the run in messages: the container's URL without its query
// (no SAS) and the prefix.
func (s *Store) String() string {
	if s.zero() {
		return "blobjournal: no container"
	}
	u := s.c.URL()
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	return strings.TrimSuffix(u, "/") + "/" + s.prefix
}

// Error is a failed request of the store: the operation, the blob name
// (relative to the prefix), and what the service answered (StatusCode,
// ErrorCode, RequestID) or, without a response, a sanitized transport
// error. It never holds a URL query, a key or a body. errors.Is finds
// fs.ErrExist for a create that met an existing blob (412, or 409
// BlobAlreadyExists; any other 409 is a plain failure) and fs.ErrNotExist
// for a missing blob (404).
type Error struct {
	Op         string // "create", "read", "list", "remove", "hold" or "live"
	Name       string
	StatusCode int    // 0 without a response
	ErrorCode  string // the service's x-ms-error-code, if any
	RequestID  string // the service's x-ms-request-id, sanitized
	Transport  string // a sanitized transport error, without a response
	kind       error  // fs.ErrExist, fs.ErrNotExist or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "blobjournal: %s %s: ", e.Op, e.Name)
	if e.StatusCode == 0 {
		b.WriteString("no response: " + e.Transport)
		return b.String()
	}
	fmt.Fprintf(&b, "status %d", e.StatusCode)
	if e.ErrorCode != "" {
		b.WriteString(" " + e.ErrorCode)
	}
	if e.RequestID != "" {
		b.WriteString(" (request ID " + e.RequestID + ")")
	}
	return b.String()
}

// Unwrap returns fs.ErrExist or fs.ErrNotExist when one applies.
func (e *Error) Unwrap() error { return e.kind }

// zero reports whether s is nil or has no container client (New(nil, …)
// or the zero Store): every method then fails with an *Error, never a
// panic.
func (s *Store) zero() bool { return s == nil || s.c == nil }

func errZero(op, name string) error {
	return &Error{Op: op, Name: name, Transport: "no container client (use blobjournal.New with a container.Client)"}
}

func (s *Store) fail(op, name string, err error) error {
	e := &Error{Op: op, Name: name}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		e.StatusCode, e.ErrorCode = re.StatusCode, re.ErrorCode
		if re.RawResponse != nil {
			e.RequestID = requestID(re.RawResponse.Header)
		}
		switch {
		case op == "create" && (re.StatusCode == http.StatusPreconditionFailed || bloberror.HasCode(err, bloberror.BlobAlreadyExists)):
			// If-None-Match: * failed (412), or the service's 409
			// BlobAlreadyExists: the name exists.
			e.kind = fs.ErrExist
		case re.StatusCode == http.StatusNotFound && op == "read":
			e.kind = fs.ErrNotExist
		}
		return e
	}
	// A transport error names the method and the URL (a SAS query, say):
	// keep only the cause of the *url.Error, never its URL.
	var ue *url.Error
	msg := err.Error()
	if errors.As(err, &ue) && ue.Err != nil {
		msg = ue.Err.Error()
	}
	e.Transport = safeText(msg)
	return e
}

// Create uploads data as the block blob prefix+name with If-None-Match: *
// and its Content-MD5, and returns its ETag.
func (s *Store) Create(ctx context.Context, name string, data []byte) (string, error) {
	if s.zero() {
		return "", errZero("create", name)
	}
	sum := md5.Sum(data)
	anyTag := azcore.ETagAny
	resp, err := s.c.NewBlockBlobClient(s.prefix+name).Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), &blockblob.UploadOptions{
		TransactionalValidation: blob.TransferValidationTypeMD5(sum[:]),
		AccessConditions:        &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyTag}},
	})
	if err != nil {
		return "", s.fail("create", name, err)
	}
	if resp.ETag == nil {
		return "", &Error{Op: "create", Name: name, StatusCode: http.StatusCreated, Transport: "no ETag"}
	}
	return string(*resp.ETag), nil
}

// Read downloads at most limit+1 bytes of prefix+name and returns them
// with the blob's ETag.
func (s *Store) Read(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	if s.zero() {
		return nil, "", errZero("read", name)
	}
	resp, err := s.c.NewBlobClient(s.prefix+name).DownloadStream(ctx, &blob.DownloadStreamOptions{
		Range: blob.HTTPRange{Offset: 0, Count: limit + 1},
	})
	if err != nil {
		if bloberror.HasCode(err, bloberror.InvalidRange) {
			// A range of an empty blob: the journal reports it as empty.
			return nil, "", nil
		}
		return nil, "", s.fail("read", name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, "", s.fail("read", name, err)
	}
	version := ""
	if resp.ETag != nil {
		version = string(*resp.ETag)
	}
	return data, version, nil
}

// List lists at most limit blob names under the prefix, without it.
func (s *Store) List(ctx context.Context, limit int) ([]string, error) {
	return s.list(ctx, "", limit)
}

// ListPrefix is the listing of a prefix that [journal.Store] describes: at most limit names under
// the store's prefix that start with prefix (a shard of a parallel run,
// shard-KK/), without the store's prefix — one listing of that prefix
// only, not of the whole run.
func (s *Store) ListPrefix(ctx context.Context, prefix string, limit int) ([]string, error) {
	return s.list(ctx, prefix, limit)
}

var _ interface {
	ListPrefix(context.Context, string, int) ([]string, error)
} = (*Store)(nil)

func (s *Store) list(ctx context.Context, sub string, limit int) ([]string, error) {
	if s.zero() {
		return nil, errZero("list", sub)
	}
	var out []string
	max := int32(min(limit, 5000))
	p := s.prefix + sub
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &p, MaxResults: &max})
	for pager.More() && len(out) < limit {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, s.fail("list", sub, err)
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name != nil && len(out) < limit {
				out = append(out, strings.TrimPrefix(*it.Name, s.prefix))
			}
		}
	}
	return out, nil
}

// EnclosingRun is the nesting check that [journal.Store] describes: it returns the prefix of
// the first run (a run.json) found at a prefix that encloses this one —
// for "a/b/" the container's "a/run.json", then "run.json" — or "" when
// none does, so that journal.OpenStore refuses a run inside another.
func (s *Store) EnclosingRun(ctx context.Context) (string, error) {
	if s.zero() {
		return "", errZero("read", "run.json")
	}
	p := strings.TrimSuffix(s.prefix, "/")
	for p != "" {
		i := strings.LastIndexByte(p, '/')
		outer := ""
		if i >= 0 {
			outer = p[:i+1]
		}
		_, err := s.c.NewBlobClient(outer+"run.json").GetProperties(ctx, nil)
		switch {
		case err == nil:
			return outer, nil
		case bloberror.HasCode(err, bloberror.BlobNotFound):
		default:
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
				return "", s.fail("read", outer+"run.json", err)
			}
		}
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return "", nil
}

var _ interface {
	EnclosingRun(context.Context) (string, error)
} = (*Store)(nil)

// Remove deletes prefix+name with If-Match: version (and, for a marker
// this Store holds, its lease ID). A blob changed or gone since is not
// deleted: the error says so (412 or 404).
func (s *Store) Remove(ctx context.Context, name, version string) error {
	if s.zero() {
		return errZero("remove", name)
	}
	if version == "" {
		return &Error{Op: "remove", Name: name, Transport: "no version to match (refused: an unconditional delete)"}
	}
	etag := azcore.ETag(version)
	ac := &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}
	s.mu.Lock()
	id, held := s.leases[name]
	s.mu.Unlock()
	if held {
		ac.LeaseAccessConditions = &blob.LeaseAccessConditions{LeaseID: &id}
	}
	_, err := s.c.NewBlobClient(s.prefix+name).Delete(ctx, &blob.DeleteOptions{AccessConditions: ac})
	if err != nil {
		return s.fail("remove", name, err)
	}
	if held {
		s.mu.Lock()
		delete(s.leases, name) // gone with its blob: nothing to release
		s.mu.Unlock()
	}
	return nil
}

// The pending marker's lease (R83). 15 s is the shortest lease Blob
// Storage grants, so a dead worker's marker is known dead within 15 s
// by the service's own clock; renewed every 5 s, a live worker's lease
// survives two lost renewals in a row, and an expired lease of a blob
// nobody changed is renewed again by the same ID (a longer outage makes
// the marker look dead only while it lasts). A marker younger than
// createGrace by the service's clock (its Date against the blob's
// Last-Modified) is live without a lease: its worker takes the lease
// right after the create.
const (
	leaseSeconds = 15
	renewEvery   = 5 * time.Second
	createGrace  = 5 * time.Second
)

// Hold implements [journal.Store]: it takes a 15 s lease on the marker
// prefix+name while its ETag is still version, and renews it every 5 s
// until release. A worker that dies stops renewing, and the service
// expires the lease. release after a failed Remove gives the lease back
// at once, so that the marker left is dead for every worker without the
// wait.
func (s *Store) Hold(ctx context.Context, name, version string) (func(), error) {
	if s.zero() {
		return nil, errZero("hold", name)
	}
	lc, err := lease.NewBlobClient(s.c.NewBlobClient(s.prefix+name), nil)
	if err != nil {
		return nil, &Error{Op: "hold", Name: name, Transport: safeText(err.Error())}
	}
	etag := azcore.ETag(version)
	if _, err := lc.AcquireLease(ctx, leaseSeconds, &lease.BlobAcquireOptions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
	}); err != nil {
		return nil, s.fail("hold", name, err)
	}
	s.mu.Lock()
	if s.leases == nil {
		s.leases = map[string]string{}
	}
	s.leases[name] = *lc.LeaseID()
	s.mu.Unlock()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(renewEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.Background(), renewEvery)
				_, _ = lc.RenewLease(rctx, nil) // a lost renewal: the next one, or the lease expires
				cancel()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			s.mu.Lock()
			_, still := s.leases[name]
			delete(s.leases, name)
			s.mu.Unlock()
			if still { // the marker's removal failed: give the lease back
				rctx, cancel := context.WithTimeout(context.Background(), renewEvery)
				_, _ = lc.ReleaseLease(rctx, nil)
				cancel()
			}
		})
	}, nil
}

// Live implements [journal.Store]: the marker prefix+name is live while
// the service shows a lease on it (leased, or breaking), or while it is
// younger than createGrace by the service's clock; it returns the
// blob's ETag.
func (s *Store) Live(ctx context.Context, name string) (bool, string, error) {
	if s.zero() {
		return false, "", errZero("live", name)
	}
	resp, err := s.c.NewBlobClient(s.prefix+name).GetProperties(ctx, nil)
	if err != nil {
		e := s.fail("live", name, err).(*Error)
		if e.StatusCode == http.StatusNotFound {
			e.kind = fs.ErrNotExist
		}
		return false, "", e
	}
	version := ""
	if resp.ETag != nil {
		version = string(*resp.ETag)
	}
	if st := resp.LeaseState; st != nil && (*st == lease.StateTypeLeased || *st == lease.StateTypeBreaking) {
		return true, version, nil
	}
	if resp.Date != nil && resp.LastModified != nil && resp.Date.Sub(*resp.LastModified) < createGrace {
		return true, version, nil
	}
	return false, version, nil
}
