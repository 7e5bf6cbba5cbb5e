package readrecovery_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeNamesRealTests holds README.md to its promise that every claim
// names the test that backs it: each Test, Example or Benchmark name the
// README mentions is a function of some _test.go file of this repository
// (any module), so renaming or deleting a backing test fails here.
func TestReadmeNamesRealTests(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:Test|Example|Benchmark)[A-Za-z0-9_]*)`").FindAllSubmatch(readme, -1) {
		named[string(m[1])] = false
	}
	if len(named) < 10 {
		t.Fatalf("README names %d tests; the pattern no longer finds them", len(named))
	}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Example|Benchmark)[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllSubmatch(src, -1) {
			if _, ok := named[string(m[1])]; ok {
				named[string(m[1])] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, found := range named {
		if !found {
			t.Errorf("README.md names %s, which no _test.go file of the repository defines", name)
		}
	}
}
