package rrazure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
)

// A store without a container client, or the nil *blobScopeStore, fails
// every exchange with ErrScopeStore, never a panic; so does a nil ctx.
// (The store against Azurite: integration/blobscopestore_test.go.)
func TestBlobScopeStoreNil(t *testing.T) {
	card := readrecovery.ScopeCard{NotBefore: time.Now()}
	for name, s := range map[string]readrecovery.ScopeStore{
		"nil client":          BlobScopeStore(nil, ""),
		"nil *blobScopeStore": (*blobScopeStore)(nil),
	} {
		if _, err := s.Exchange(context.Background(), "https://acct.blob.core.windows.net", card, readrecovery.ScopeMember{}); !errors.Is(err, readrecovery.ErrScopeStore) {
			t.Errorf("%s: err = %v, want ErrScopeStore", name, err)
		}
	}
	var nilCtx context.Context
	if _, err := BlobScopeStore(nil, "").Exchange(nilCtx, "x", card, readrecovery.ScopeMember{}); !errors.Is(err, readrecovery.ErrScopeStore) {
		t.Errorf("nil ctx: err = %v, want ErrScopeStore", err)
	}
}
