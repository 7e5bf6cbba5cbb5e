package rropenai_test

import (
	"os"
	"testing"

	rropenai "github.com/readrecovery/readrecovery/openai"
)

// TestMain gives each transport of the package's defaults a table of its
// own (the tests reuse fake hosts, many inside synctest bubbles);
// TestTransportsShareProcessScopes restores the process's one table.
func TestMain(m *testing.M) {
	rropenai.PrivateScopes()
	os.Exit(m.Run())
}
