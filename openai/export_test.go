package rropenai

import "github.com/readrecovery/readrecovery"

// PrivateScopes makes the package's defaults give each transport a table
// of its own, as before R102, so that its tests (many in synctest bubbles,
// on the same fake hosts) do not share one scope's restrictions across
// tests (TestMain); ProcessScopes restores the process's table.
func PrivateScopes() {
	scopes = func() *readrecovery.Scopes { return readrecovery.NewScopes(readrecovery.AzureScope) }
}

func ProcessScopes() { scopes = readrecovery.AzureScopes }
