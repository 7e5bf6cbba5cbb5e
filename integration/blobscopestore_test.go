package integration

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/scopecard"
	"github.com/readrecovery/readrecovery/scopestoretest"
)

// scopeContainer makes a container of its own in az and returns a client
// of it for the store: straight to Azurite, with the plain options of the
// journal store (no readrecovery, no retry).
func scopeContainer(t testing.TB, az *azurite) (*container.Client, string) {
	t.Helper()
	name := "rr-scopes-" + randomHex(6)
	if _, err := newBlobClient(t, az.URL, policy.ClientOptions{}).CreateContainer(context.Background(), name, nil); err != nil {
		t.Fatalf("create container %s: %v", name, err)
	}
	return storeClient(t, az.URL, name), name
}

// The conformance suite against Azurite, each store under a prefix of
// its own in one container. F3's writers meet each other's conditional
// writes: Azurite answered 412 to some card writes, and none was lost.
//
// The store's other tests are its subtests, so that one Azurite serves
// them all.
func TestBlobScopeStore(t *testing.T) {
	az := startAzurite(t)
	t.Run("no-scope-text", func(t *testing.T) { testBlobScopeStoreNoScopeText(t, az) })
	t.Run("blobs", func(t *testing.T) { testBlobScopeStoreBlobs(t, az) })
	t.Run("corrupt-card", func(t *testing.T) { testBlobScopeStoreCorruptCard(t, az) })
	c, name := scopeContainer(t, az)
	scopestoretest.Test(t, func(t *testing.T) readrecovery.ScopeStore {
		return rrazure.BlobScopeStore(c, "t-"+randomHex(4)+"/")
	})
	var puts, lost412 int
	for _, e := range az.Seen(t, "/"+azuriteAccount+"/"+name+"/") {
		if e.Method == "PUT" && strings.HasSuffix(e.Path, "/card.json") {
			puts++
			if e.Status == 412 || e.Status == 409 {
				lost412++
			}
		}
	}
	t.Logf("card PUTs: %d, of which %d met another writer's (412/409) and were retried", puts, lost412)
	if lost412 == 0 {
		t.Errorf("no card write met a 412/409: F3's writers never raced, the conditional writes went untested")
	}
}

// blobDump returns every blob name under prefix, its content and its
// metadata (decoded).
func blobDump(t *testing.T, c *container.Client, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Segment.BlobItems {
			out = append(out, *it.Name)
			for k, v := range it.Metadata {
				b, _ := base64.RawURLEncoding.DecodeString(*v)
				out = append(out, k, *v, string(b))
			}
			resp, err := c.NewBlobClient(*it.Name).DownloadStream(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(data))
		}
	}
	return out
}

func testBlobScopeStoreNoScopeText(t *testing.T, az *azurite) {
	c, _ := scopeContainer(t, az)
	prefix := "t-" + randomHex(4) + "/"
	scopestoretest.NoScopeText(t, rrazure.BlobScopeStore(c, prefix), func(t *testing.T) []string { return blobDump(t, c, prefix) })
}

// The blobs an exchange leaves: exactly the card (its exact bytes) and the
// member's blob (record as content and metadata), named by digests.
func testBlobScopeStoreBlobs(t *testing.T, az *azurite) {
	c, _ := scopeContainer(t, az)
	prefix := "t-" + randomHex(4) + "/"
	s := rrazure.BlobScopeStore(c, prefix)
	t0 := scopestoretest.T0
	card := readrecovery.ScopeCard{NotBefore: t0.Add(1500 * time.Millisecond), RequestID: "req-1", Rate: 2.5, Burst: 10, Learnt: t0}
	lease := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	m := readrecovery.ScopeMember{ID: "proc-1", Demand: 4, Share: 2, Lease: lease}
	v := scopestoretest.Exchange(t, s, "https://acct.blob.core.windows.net", card, m)
	if v.Card != card || len(v.Members) != 1 || v.Members[0] != m {
		t.Fatalf("view = %+v, want card %+v and member %+v", v, card, m)
	}
	if d := time.Since(v.Now); d < -2*time.Second || d > 2*time.Second {
		t.Fatalf("store time %v is %v from the local clock (Azurite runs here)", v.Now, d)
	}
	h, mh := "351982ae40f6f5dfd1a1f61fe442ade8", "d656b978a0c0ad57a9b338035a46f364"
	got := blobDump(t, c, prefix)
	wantCard := fmt.Sprintf(`{"v":1,"not_before_ms":%d,"request_id":"req-1","rate":2.5,"burst":10,"learnt_ms":%d}`+"\n",
		t0.Add(1500*time.Millisecond).UnixMilli(), t0.UnixMilli())
	// name, content; name, metadata key, value, value decoded, content
	if len(got) != 7 || got[0] != prefix+h+"/card.json" || got[1] != wantCard || got[2] != prefix+h+"/m-"+mh+".json" ||
		got[3] != "rrmember" || got[6] != got[5]+"\n" ||
		!strings.HasPrefix(got[5], fmt.Sprintf(`{"v":1,"id":"proc-1","demand":4,"share":2,"lease_ms":%d,"written_ms":`, lease.UnixMilli())) {
		t.Fatalf("blobs = %q", got)
	}
}

// A card that fails to decode fails every exchange with a typed error
// naming its blob, and is never overwritten.
func testBlobScopeStoreCorruptCard(t *testing.T, az *azurite) {
	c, _ := scopeContainer(t, az)
	prefix := "t-" + randomHex(4) + "/"
	s := rrazure.BlobScopeStore(c, prefix)
	scope := scopestoretest.Scope(t)
	name := prefix + scopecard.Name(scope) + "/card.json"
	ctx := context.Background()
	for _, bad := range []string{`{"v":1,"extra":1}`, `not json`, strings.Repeat(" ", 2000)} {
		up, err := c.NewBlockBlobClient(name).UploadBuffer(ctx, []byte(bad), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, card := range []readrecovery.ScopeCard{{}, {NotBefore: time.Now().Add(time.Hour), RequestID: "req-2"}} {
			_, err := s.Exchange(ctx, scope, card, readrecovery.ScopeMember{})
			var ce *scopecard.CorruptError
			if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.As(err, &ce) || ce.Name != name {
				t.Fatalf("card %.20q: err = %v, want ErrScopeStore and a corrupt %s", bad, err, name)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("the error names the scope: %v", err)
			}
			props, err := c.NewBlobClient(name).GetProperties(ctx, nil)
			if err != nil || *props.ETag != *up.ETag {
				t.Fatalf("card %.20q was overwritten (%v)", bad, err)
			}
		}
	}
}

// A service that is gone (nothing listens): an exchange fails at once with
// ErrScopeStore and the connection's error (the dialled address, no URL
// and so no query); one that never
// answers: when ctx is done, with ctx's error.
func TestBlobScopeStoreServiceDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hung := "http://" + l.Addr().String()
	defer l.Close()
	go func() { // accepts and never answers
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneURL := "http://" + gone.Addr().String()
	gone.Close()

	scope := scopestoretest.Scope(t)
	card := readrecovery.ScopeCard{NotBefore: time.Now().Add(time.Hour), RequestID: "req-1"}
	s := rrazure.BlobScopeStore(storeClient(t, goneURL, "scopes"), "")
	start := time.Now()
	_, err = s.Exchange(context.Background(), scope, card, readrecovery.ScopeMember{})
	took := time.Since(start)
	if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "http://") || took > time.Second {
		t.Fatalf("service gone: err = %v after %v, want ErrScopeStore and ECONNREFUSED at once, no URL", err, took)
	}
	t.Logf("service gone: %v after %v", err, took)

	s = rrazure.BlobScopeStore(storeClient(t, hung, "scopes"), "")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = s.Exchange(ctx, scope, card, readrecovery.ScopeMember{})
	took = time.Since(start)
	if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Fatalf("service hung: err = %v after %v, want ErrScopeStore and DeadlineExceeded at 200 ms", err, took)
	}
	t.Logf("service hung: %v after %v", err, took)
}

// BenchmarkExchange measures one exchange of the Blob store against a
// local Azurite (docs/fleets.md, "Stores"; the two exchanges:
// scopestoretest.Bench).
func BenchmarkExchange(b *testing.B) {
	az := startAzurite(b)
	c, _ := scopeContainer(b, az)
	scopestoretest.Bench(b, rrazure.BlobScopeStore(c, "bench/"))
}
