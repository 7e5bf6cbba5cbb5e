package rrazure

import "github.com/readrecovery/readrecovery"

// AzcoreDefaultStatusCodes lets the tests compare rrazure's copy of
// azcore's defaults with what azcore does.
var AzcoreDefaultStatusCodes = azcoreDefaultStatusCodes

// IsMutation and WithoutQuery are the module's own copies of the
// transport's method rule and of its URL redaction, under test.
var (
	IsMutation   = isMutation
	WithoutQuery = withoutQuery
)

// PrivateScopes makes the package's defaults give each transport a table
// of its own, as before R102, so that its tests do not share one scope's
// restrictions across tests (TestMain); ProcessScopes restores the
// process's table.
func PrivateScopes() {
	scopes = func() *readrecovery.Scopes { return readrecovery.NewScopes(readrecovery.AzureScope) }
}

func ProcessScopes() { scopes = readrecovery.AzureScopes }
