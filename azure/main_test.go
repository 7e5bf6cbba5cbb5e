package rrazure_test

import (
	"os"
	"testing"

	rrazure "github.com/readrecovery/readrecovery/azure"
)

// TestMain gives each transport of the package's defaults a table of its
// own (the tests reuse fake hosts, many inside synctest bubbles);
// TestTransportsShareProcessScopes restores the process's one table.
func TestMain(m *testing.M) {
	rrazure.PrivateScopes()
	os.Exit(m.Run())
}
