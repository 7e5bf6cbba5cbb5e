package rrazure

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/scopecard"
)

// BlobScopeStore returns a [readrecovery.ScopeStore] kept in the container
// of c under prefix ("" for the container's root; a prefix usually ends
// with "/"), for the processes of a fleet on any number of machines
// (docs/fleets.md, "Stores"). The container must exist.
//
// Each scope is the blobs under prefix+DIGEST+"/" (DIGEST: the first 32
// hex digits of the SHA-256 of the scope's text; no blob name carries the
// text): card.json, the card, replaced only by a conditional write
// (If-Match on the ETag it was read with, or If-None-Match: * to create
// it), the read-merge-write retried when another writer came first (412,
// or 409 BlobAlreadyExists) until it succeeds or ctx is done; and one
// m-DIGEST.json per member (DIGEST: of the member's ID), written by that
// member alone, its record also in the blob's metadata so that one
// listing reads every member. A member whose lease ended is not returned;
// one whose lease ended more than ten lease periods ago is deleted
// (If-Match on its listed ETag). An exchange whose card changes nothing
// writes no card: a timer exchange is a read of the card, a write of the
// member and a listing (three requests).
//
// Its clock is the service's: [readrecovery.ScopeView.Now] is the latest
// Date header of the exchange's responses, to the second, and
// [readrecovery.ScopeView.Resolution] says so (a second; the local clock,
// to the millisecond, only if no response carried a Date).
//
// The store's requests must not pass through a readrecovery transport:
// build c with plain client options (blobjournal.ClientOptions is one:
// go-cleanhttp, no retry), never with [ClientOptions]. Every error wraps
// [readrecovery.ErrScopeStore] and names the blob (digests only), the
// status, the service's error code and request ID, or a transport error
// without its URL; a card that fails to decode is left as it is. A nil c
// is an error at every exchange, never a panic.
func BlobScopeStore(c *container.Client, prefix string) readrecovery.ScopeStore {
	return &blobScopeStore{c: c, prefix: prefix}
}

type blobScopeStore struct {
	c      *container.Client
	prefix string
}

// Names of a scope's blobs, under prefix+DIGEST+"/".
const (
	blobCardName = "card.json"
	// blobMemberMeta is the metadata key of a member blob's record
	// (base64url of its JSON).
	blobMemberMeta = "rrmember"
	// blobCardTries bounds the read-merge-write of a card under
	// contention (ctx bounds it in time).
	blobCardTries = 50
)

func (s *blobScopeStore) Exchange(ctx context.Context, scope string, card readrecovery.ScopeCard, member readrecovery.ScopeMember) (readrecovery.ScopeView, error) {
	if ctx == nil {
		return readrecovery.ScopeView{}, blobFail("exchange", "", errors.New("nil context"))
	}
	if err := ctx.Err(); err != nil {
		return readrecovery.ScopeView{}, blobFail("exchange", "", err)
	}
	if s == nil || s.c == nil {
		return readrecovery.ScopeView{}, blobFail("exchange", "", errors.New("no container client"))
	}
	if scope == "" {
		return readrecovery.ScopeView{}, blobFail("exchange", "", fmt.Errorf("%w: empty scope", scopecard.ErrInvalid))
	}
	in, err := scopecard.CheckCard(scopecard.Card(card))
	if err != nil {
		return readrecovery.ScopeView{}, blobFail("exchange: card", "", err)
	}
	m, err := scopecard.CheckMember(scopecard.Member(member))
	if err != nil {
		return readrecovery.ScopeView{}, blobFail("exchange: member", "", err)
	}
	dir := s.prefix + scopecard.Name(scope) + "/"

	stored, now, err := s.mergeCard(ctx, dir, in)
	if err != nil {
		return readrecovery.ScopeView{}, err
	}
	if m.ID != "" {
		if now, err = s.writeMember(ctx, dir, m, now); err != nil {
			return readrecovery.ScopeView{}, err
		}
	}
	members, now, err := s.members(ctx, dir, now)
	if err != nil {
		return readrecovery.ScopeView{}, err
	}
	resolution := time.Second // a Date header is to the second
	if now.IsZero() {
		// No response carried a Date (the service always sends one; a
		// proxy may drop it): the local clock, rather than no time.
		now, resolution = scopecard.Normal(time.Now()), time.Millisecond
	}
	if m.ID != "" {
		// The caller's own record is the one it just wrote, whatever a
		// listing saw.
		members = slices.DeleteFunc(members, func(x readrecovery.ScopeMember) bool { return x.ID == m.ID })
		if m.Lease.After(now) {
			members = append(members, readrecovery.ScopeMember(m))
		}
	}
	slices.SortFunc(members, func(a, b readrecovery.ScopeMember) int { return strings.Compare(a.ID, b.ID) })
	return readrecovery.ScopeView{Card: readrecovery.ScopeCard(stored), Members: members, Now: now, Resolution: resolution}, nil
}

// mergeCard merges in into the card under dir with conditional writes and
// returns the merged card and the service's time.
func (s *blobScopeStore) mergeCard(ctx context.Context, dir string, in scopecard.Card) (scopecard.Card, time.Time, error) {
	name := dir + blobCardName
	bc := s.c.NewBlockBlobClient(name)
	for try := 0; ; try++ {
		stored, etag, now, err := s.readCard(ctx, name)
		if err != nil {
			return scopecard.Card{}, time.Time{}, err
		}
		merged := scopecard.Merge(stored, in)
		if merged == stored {
			return stored, now, nil
		}
		cond := &blob.ModifiedAccessConditions{}
		if etag == "" {
			anyTag := azcore.ETagAny
			cond.IfNoneMatch = &anyTag
		} else {
			cond.IfMatch = &etag
		}
		resp, err := bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(scopecard.EncodeCard(merged))), &blockblob.UploadOptions{
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: cond},
			HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: ptr("application/json")},
		})
		if err == nil {
			return merged, serviceTime(resp.Date), nil
		}
		var re *azcore.ResponseError
		lost := errors.As(err, &re) && (re.StatusCode == http.StatusPreconditionFailed || bloberror.HasCode(err, bloberror.BlobAlreadyExists))
		if !lost {
			return scopecard.Card{}, time.Time{}, blobFail("write card", name, err)
		}
		if try+1 >= blobCardTries {
			return scopecard.Card{}, time.Time{}, blobFail("write card", name, fmt.Errorf("another writer came first %d times", blobCardTries))
		}
		// Another writer came first: read again after a short pause that
		// spreads the losers.
		pause := time.Duration(rand.IntN(5*(try+1))+1) * time.Millisecond
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return scopecard.Card{}, time.Time{}, blobFail("write card", name, ctx.Err())
		case <-t.C:
		}
	}
}

// readCard reads the card blob name: the card, its ETag ("" when there is
// none) and the service's time.
func (s *blobScopeStore) readCard(ctx context.Context, name string) (scopecard.Card, azcore.ETag, time.Time, error) {
	resp, err := s.c.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusNotFound && re.RawResponse != nil {
			return scopecard.Card{}, "", serviceTime(dateHeader(re.RawResponse.Header)), nil
		}
		return scopecard.Card{}, "", time.Time{}, blobFail("read card", name, err)
	}
	defer resp.Body.Close()
	if resp.ETag == nil {
		return scopecard.Card{}, "", time.Time{}, blobFail("read card", name, errors.New("no ETag"))
	}
	if resp.ContentLength != nil && *resp.ContentLength > scopecard.MaxCardBytes {
		return scopecard.Card{}, "", time.Time{}, blobFail("read card", name, &scopecard.CorruptError{Name: name,
			Reason: fmt.Sprintf("%d bytes, more than %d", *resp.ContentLength, scopecard.MaxCardBytes)})
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, scopecard.MaxCardBytes+1))
	if err != nil {
		return scopecard.Card{}, "", time.Time{}, blobFail("read card", name, err)
	}
	c, err := scopecard.DecodeCard(name, b)
	if err != nil {
		return scopecard.Card{}, "", time.Time{}, blobFail("read card", name, err)
	}
	return c, *resp.ETag, serviceTime(resp.Date), nil
}

// writeMember replaces the member's blob with its record (content and
// metadata) and returns the service's time.
func (s *blobScopeStore) writeMember(ctx context.Context, dir string, m scopecard.Member, now time.Time) (time.Time, error) {
	name := dir + "m-" + scopecard.Name(m.ID) + ".json"
	rec := scopecard.EncodeMember(m, now)
	meta := base64.RawURLEncoding.EncodeToString(bytes.TrimSuffix(rec, []byte("\n")))
	resp, err := s.c.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(rec)), &blockblob.UploadOptions{
		Metadata:    map[string]*string{blobMemberMeta: &meta},
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: ptr("application/json")},
	})
	if err != nil {
		return time.Time{}, blobFail("write member", name, err)
	}
	return later(now, serviceTime(resp.Date)), nil
}

// members lists the member blobs under dir and returns the live members
// and the service's time; it deletes those stale for ten lease periods.
// A record that fails to decode is skipped.
func (s *blobScopeStore) members(ctx context.Context, dir string, now time.Time) ([]readrecovery.ScopeMember, time.Time, error) {
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  ptr(dir + "m-"),
		Include: container.ListBlobsInclude{Metadata: true},
	})
	type entry struct {
		name    string
		etag    azcore.ETag
		m       scopecard.Member
		written time.Time
	}
	var all []entry
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, time.Time{}, blobFail("list members", dir, err)
		}
		now = later(now, serviceTime(page.Date))
		if page.Segment == nil {
			continue
		}
		for _, it := range page.Segment.BlobItems {
			if it == nil || it.Name == nil || it.Properties == nil || it.Properties.ETag == nil {
				continue
			}
			var meta *string
			for k, v := range it.Metadata { // the service may change a key's case
				if strings.EqualFold(k, blobMemberMeta) {
					meta = v
				}
			}
			if meta == nil || len(*meta) > 2*scopecard.MaxMemberBytes {
				continue
			}
			b, err := base64.RawURLEncoding.DecodeString(*meta)
			if err != nil {
				continue
			}
			m, written, err := scopecard.DecodeMember(*it.Name, b)
			if err != nil || *it.Name != dir+"m-"+scopecard.Name(m.ID)+".json" {
				continue // a corrupt record, or one under another's name
			}
			all = append(all, entry{*it.Name, *it.Properties.ETag, m, written})
		}
	}
	var live []readrecovery.ScopeMember
	for _, e := range all {
		switch {
		case e.m.Lease.After(now):
			live = append(live, readrecovery.ScopeMember(e.m))
		case scopecard.Stale(e.m, e.written, now):
			// Best effort: If-Match, so that a record its member just
			// rewrote stays.
			etag := e.etag
			_, _ = s.c.NewBlobClient(e.name).Delete(ctx, &blob.DeleteOptions{
				AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}},
			})
		}
	}
	return live, now, nil
}

// serviceTime is the service's Date as a store time (UTC; the zero time
// when there is none).
func serviceTime(d *time.Time) time.Time {
	if d == nil {
		return time.Time{}
	}
	return scopecard.Normal(*d)
}

func dateHeader(h http.Header) *time.Time {
	t, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return nil
	}
	return &t
}

// later returns the later of two service times (a response without a
// Date keeps the earlier one).
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func ptr[T any](v T) *T { return &v }

// blobFail wraps err as a failure of the Blob scope store: what was done,
// the blob (digests only), and what the service answered (status, error
// code, request ID) or, without a response, the transport's error without
// its URL (a SAS query).
func blobFail(what, name string, err error) error {
	var re *azcore.ResponseError
	var ue *url.Error
	switch {
	case errors.As(err, &re):
		msg := fmt.Sprintf("status %d", re.StatusCode)
		if re.ErrorCode != "" {
			msg += " " + safeToken(re.ErrorCode)
		}
		if re.RawResponse != nil {
			if id := safeToken(re.RawResponse.Header.Get("x-ms-request-id")); id != "" {
				msg += " (request ID " + id + ")"
			}
		}
		err = errors.New(msg)
	case errors.As(err, &ue) && ue.Err != nil:
		err = ue.Err // keeps context errors and syscall errors for errors.Is
	}
	if name != "" {
		what += " " + name
	}
	return fmt.Errorf("%w: blob: %s: %w", readrecovery.ErrScopeStore, what, err)
}

// safeToken is s when it is a plain token (letters, digits, '-', '_', '.';
// at most 64 bytes), else "": an error names a service's code or request
// ID, never text it was not built to carry.
func safeToken(s string) string {
	if len(s) > 64 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return ""
		}
	}
	return s
}
