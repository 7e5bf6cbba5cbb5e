package readrecovery

import (
	"net/http"
	"testing"
)

// BenchmarkAzureScope is AzureScope's own cost per request, for each kind
// of scope, with the host spelt canonically (the usual case, which should
// allocate no more than the scope string itself) and, where it says so,
// spelt otherwise (upper case, a trailing dot, the default port).
func BenchmarkAzureScope(b *testing.B) {
	for _, tc := range []struct{ name, url string }{
		{"storage", "https://acct.blob.core.windows.net/container/blob"},
		{"storage-spelt", "https://ACCT.Blob.Core.Windows.Net.:443/container/blob"},
		{"arm", "https://management.azure.com/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines"},
		{"openai", "https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions"},
		{"search", "https://svc.search.windows.net/indexes/i/docs"},
		{"fallback", "https://api.example.com/v1/items"},
		{"fallback-spelt", "https://API.Example.com.:443/v1/items"},
	} {
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				AzureScope(req)
			}
		})
	}
}
