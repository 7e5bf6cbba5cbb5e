package journal

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/require"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus of the record fuzzers (testdata/fuzz) in the current format")

// corpusSeeds are the valid files of the current format that the record
// fuzzers keep as their seed corpus in testdata/fuzz (plain `go test`
// runs them, `go test -fuzz` starts from them): one per target and file,
// from the fuzzers' own base runs.
func corpusSeeds(t *testing.T) map[string][]byte {
	base, _ := fuzzBase(t)
	nb, _ := fuzzBaseNew(t)
	pb, _ := parallelFuzzBase(t)
	second, headName2, head2 := validSecondWithHead(t, base)
	_, review := baseFile(t, nb, "review-")
	_, head := baseFile(t, nb, "head-")
	return map[string][]byte{
		"FuzzLoadEntry/first":          base["run/backoff-0001.json"].Data,
		"FuzzLoadEntry/second":         second,
		"FuzzLoadManifest/manifest":    base["run/run.json"].Data,
		"FuzzLoadPart/part-1":          nb["run/"+record.PartName(record.FileDigest("b.bin"), 1)].Data,
		"FuzzLoadPart/part-2":          nb["run/"+record.PartName(record.FileDigest("b.bin"), 2)].Data,
		"FuzzLoadReview/review":        review,
		"FuzzLoadHead/head":            head,
		"FuzzLoadHead/" + headName2:    head2,
		"FuzzLoadPlanList/plan":        nb["run/plan.json"].Data,
		"FuzzLoadRootManifest/root":    pb["run/run.json"].Data,
		"FuzzLoadRootManifest/shard-1": pb["run/shard-01/run.json"].Data,
	}
}

// TestFuzzSeedCorpus: the seed corpus in testdata/fuzz is of the current
// format: every seed corpusSeeds makes is there, every record seed opens
// with the one loader as a record of its target's kind, every manifest and
// plan seed with its own parser (go test -run TestFuzzSeedCorpus
// -update-corpus rewrites them after a format change).
func TestFuzzSeedCorpus(t *testing.T) {
	seeds := corpusSeeds(t)
	if *updateCorpus {
		for name, data := range seeds {
			p := filepath.Join("testdata", "fuzz", name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(data))+")\n"), 0o644))
		}
	}
	kinds := map[string]string{"FuzzLoadEntry": record.KindEntry, "FuzzLoadPart": record.KindPart, "FuzzLoadReview": record.KindReview, "FuzzLoadHead": record.KindHead}
	found := 0
	for name := range seeds {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", name))
		require.NoError(t, err, "the seed %s is missing: run go test -run TestFuzzSeedCorpus -update-corpus", name)
		text, ok := strings.CutPrefix(string(b), "go test fuzz v1\n[]byte(")
		require.True(t, ok, "%s: a corpus file of one []byte", name)
		lit, ok := strings.CutSuffix(text, ")\n")
		require.True(t, ok, name)
		s, err := strconv.Unquote(lit)
		require.NoError(t, err, name)
		data := []byte(s)
		target := strings.Split(name, "/")[0]
		switch {
		case kinds[target] != "":
			_, kind, _, err := record.Unseal(data)
			require.NoError(t, err, "%s is a record of the current format", name)
			require.Equal(t, kinds[target], kind, name)
		case target == "FuzzLoadPlanList":
			_, _, err = record.ParsePlanList(data)
			require.NoError(t, err, name)
		default:
			mi, err := record.ParseManifest(data)
			require.NoError(t, err, name)
			require.False(t, mi.Legacy, name)
		}
		found++
	}
	require.Equal(t, len(seeds), found)
}
