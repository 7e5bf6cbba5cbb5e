package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R85 through the command: an upload's marker removed by hand makes
// `journal status` and `verify` unresolved (exit 4, the marker named),
// `plan` never lists the file for upload, and `journal review --pending`
// is the way out (exit 3, waiting; the file unknown).
func TestJournalMarkerRemovedByHand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	j, err := journal.Open(dir, journal.WithPlan([]journal.PlannedFile{{ID: "a.bin"}}))
	require.NoError(t, err)
	u, _ := url.Parse("https://acct.file.core.windows.net/share/a.bin?sig=SECRET")
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: redact.URLDigest(u), Attempt: 1}
	require.NoError(t, j.Begin(journal.WithUpload(context.Background(), "a.bin"), req))
	require.NoError(t, os.Remove(filepath.Join(dir, "pending-request.json")))

	code, stdout, _ := runJ("status", dir)
	assert.Equal(t, 4, code)
	assert.Contains(t, stdout, `"state":"unresolved"`)
	assert.Contains(t, stdout, `"reason":"pending-request.json: missing: the upload begun in head-0001.json`)
	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 1, code)
	assert.True(t, strings.HasPrefix(stdout, "pending-request.json: missing: the upload begun in head-0001.json"), stdout)

	code, stdout, stderr := runJ("review", dir, "--pending", "--note", "marker removed by hand")
	require.Equal(t, 3, code, "%s%s", stdout, stderr)
	assert.Contains(t, stdout, "file "+journal.PlannedFile{ID: "a.bin"}.Digest()+" (now unknown")
	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 0, code, stdout)
	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 3, code, stdout)
	assert.Contains(t, stdout, `"state":"waiting"`)
}
