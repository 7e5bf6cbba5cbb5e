package readrecovery_test

import (
	"path/filepath"
	"testing"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/scopestoretest"
)

// BenchmarkExchange measures one exchange of the directory store
// (docs/fleets.md, "Stores"; the two exchanges: scopestoretest.Bench).
func BenchmarkExchange(b *testing.B) {
	s, err := readrecovery.DirScopeStore(filepath.Join(b.TempDir(), "scopes"))
	if err != nil {
		b.Fatal(err)
	}
	scopestoretest.Bench(b, s)
}
