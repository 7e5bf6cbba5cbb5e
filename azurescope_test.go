package readrecovery

import (
	"net/http"
	"strings"
	"testing"
)

// azureScopeCases are TestAzureScope's table, and seeds of FuzzAzureScope.
func azureScopeCases() []struct{ url, want string } {
	return []struct{ url, want string }{
		// Resource Manager: the subscription, whatever follows.
		{"https://management.azure.com/subscriptions/0000-AA/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines?api-version=2024-01-01", "arm:management.azure.com/subscriptions/0000-aa"},
		{"https://management.azure.com/subscriptions/1111/providers?api-version=1", "arm:management.azure.com/subscriptions/1111"},
		{"https://management.usgovcloudapi.net/subscriptions/2222/resourcegroups", "arm:management.usgovcloudapi.net/subscriptions/2222"},
		{"https://management.chinacloudapi.cn/subscriptions/3333", "arm:management.chinacloudapi.cn/subscriptions/3333"},
		{"https://management.azure.com/providers/Microsoft.Resources/operations", "arm:management.azure.com"},
		{"https://management.azure.com/subscriptions/", "arm:management.azure.com"},
		// Storage: account and service.
		{"https://acct.blob.core.windows.net/c/b?sig=SECRET", "storage:acct/blob"},
		{"https://Acct.QUEUE.core.windows.net/q/messages", "storage:acct/queue"},
		{"https://acct.file.core.windows.net/share", "storage:acct/file"},
		{"https://acct.table.core.windows.net/t", "storage:acct/table"},
		{"https://acct.dfs.core.windows.net/fs/p", "storage:acct/dfs"},
		{"https://acct-secondary.blob.core.windows.net/c", "storage:acct/blob"},
		{"https://acct.blob.core.usgovcloudapi.net/c", "storage:acct/blob"},
		{"http://127.0.0.1:10000/devstoreaccount1/c/b?comp=list", "storage:devstoreaccount1/blob"},
		{"http://localhost:10001/devstoreaccount1/q", "storage:devstoreaccount1/queue"},
		{"http://127.0.0.1:10000/", "http://127.0.0.1:10000"},
		{"https://acct.web.core.windows.net/index.html", "https://acct.web.core.windows.net"},
		// Azure OpenAI: resource and deployment.
		{"https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", "openai:res/gpt-4o"},
		{"https://res.cognitiveservices.azure.com/openai/deployments/Emb/embeddings", "openai:res/emb"},
		{"https://res.openai.azure.com/openai/files?api-version=1", "openai:res"},
		{"https://res.openai.azure.com/openai/deployments", "openai:res"},
		// AI Search: the service.
		{"https://svc.search.windows.net/indexes/i/docs?api-key=SECRET", "search:svc"},
		// Anything else: scheme and host.
		{"https://api.openai.com/v1/chat/completions", "https://api.openai.com"},
		{"http://127.0.0.1:8080/x?token=SECRET", "http://127.0.0.1:8080"},
		{"https://user:SECRET@example.com/subscriptions/9", "https://example.com"},
		// A segment that is no Azure name (a subscription ID, deployment or
		// account holds letters, digits, '-', '_', '.') names nothing: the
		// scope is the next wider one, and holds no '@' or '?'.
		{"https://management.azure.com/subscriptions/user@SECRET/resourceGroups", "arm:management.azure.com"},
		{"https://management.azure.com/subscriptions/a%3Fsig=SECRET/resourceGroups", "arm:management.azure.com"},
		{"https://res.openai.azure.com/openai/deployments/d@SECRET/chat/completions", "openai:res"},
		{"http://127.0.0.1:10000/user@SECRET/c", "http://127.0.0.1:10000"},
	}
}

func TestAzureScope(t *testing.T) {
	for _, tc := range azureScopeCases() {
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := AzureScope(req)
		if got != tc.want {
			t.Errorf("AzureScope(%s) = %q, want %q", tc.url, got, tc.want)
		}
		if strings.Contains(strings.ToLower(got), "secret") || strings.ContainsAny(got, "?@") {
			t.Errorf("AzureScope(%s) = %q holds a secret", tc.url, got)
		}
	}
	if got := AzureScope(nil); got != "" {
		t.Errorf("AzureScope(nil) = %q", got)
	}
}

// TestAzureScopeSpellings: the spellings of one Azure unit (host case, a
// trailing dot, the scheme's default port) give that unit's one scope,
// and distinct units stay distinct.
func TestAzureScopeSpellings(t *testing.T) {
	rowOf := map[string]string{} // scope -> row: distinct units, distinct scopes
	for _, tc := range azureScopeSpellingCases() {
		if row, dup := rowOf[tc.want]; dup {
			t.Errorf("rows %s and %s both want %q", row, tc.name, tc.want)
		}
		rowOf[tc.want] = tc.name
		t.Run(tc.name, func(t *testing.T) {
			for _, u := range tc.urls {
				req, err := http.NewRequest(http.MethodGet, u, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := AzureScope(req); got != tc.want {
					t.Errorf("AzureScope(%s) = %q, want %q", u, got, tc.want)
				}
			}
		})
	}
}

// azureScopeSpellingCases are TestAzureScopeSpellings' table, and seeds
// of FuzzAzureScope: each row's URLs are spellings of one unit.
func azureScopeSpellingCases() []struct {
	name string
	urls []string
	want string
} {
	return []struct {
		name string
		urls []string
		want string
	}{
		{"storage", []string{
			"https://acct.blob.core.windows.net/c/b",
			"https://ACCT.Blob.Core.Windows.Net/c/b",
			"https://acct.blob.core.windows.net./c/b",
			"https://acct.blob.core.windows.net:443/c/b",
			"HTTPS://Acct.Blob.Core.Windows.Net.:443/c/b",
			"http://acct.blob.core.windows.net:80/c/b", // the account, whichever scheme
		}, "storage:acct/blob"},
		{"arm", []string{
			"https://management.azure.com/subscriptions/0a1b2c3d-0000-4000-8000-00000000abcd/resourceGroups/rg",
			"https://MANAGEMENT.Azure.Com/subscriptions/0a1b2c3d-0000-4000-8000-00000000abcd/resourceGroups/rg",
			"https://management.azure.com./subscriptions/0a1b2c3d-0000-4000-8000-00000000abcd/resourceGroups/rg",
			"https://management.azure.com:443/subscriptions/0a1b2c3d-0000-4000-8000-00000000abcd/resourceGroups/rg",
			"https://management.azure.com/SUBSCRIPTIONS/0A1B2C3D-0000-4000-8000-00000000ABCD/resourceGroups/rg",
		}, "arm:management.azure.com/subscriptions/0a1b2c3d-0000-4000-8000-00000000abcd"},
		{"openai", []string{
			"https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions",
			"https://RES.OpenAI.Azure.Com/openai/deployments/gpt-4o/chat/completions",
			"https://res.openai.azure.com./openai/deployments/gpt-4o/chat/completions",
			"https://res.openai.azure.com:443/openai/deployments/gpt-4o/chat/completions",
			"https://res.openai.azure.com/OpenAI/Deployments/GPT-4o/chat/completions",
		}, "openai:res/gpt-4o"},
		{"search", []string{
			"https://svc.search.windows.net/indexes/i/docs",
			"https://SVC.Search.Windows.Net/indexes/i/docs",
			"https://svc.search.windows.net./indexes/i/docs",
			"https://svc.search.windows.net:443/indexes/i/docs",
		}, "search:svc"},
		{"fallback-https", []string{
			"https://api.example.com/v1",
			"https://API.Example.Com/v1",
			"https://api.example.com./v1",
			"https://api.example.com:443/v1",
		}, "https://api.example.com"},
		{"fallback-http", []string{
			"http://api.example.com/v1",
			"http://API.EXAMPLE.COM./v1",
			"http://api.example.com:80/v1",
		}, "http://api.example.com"},
		// Distinct units stay distinct.
		{"fallback-other-port", []string{"https://api.example.com:8443/v1", "https://API.example.com.:8443/v1"}, "https://api.example.com:8443"},
		{"fallback-https-port-on-http", []string{"http://api.example.com:443/v1"}, "http://api.example.com:443"},
		{"fallback-ipv6", []string{"https://[::1]/x", "https://[::1]:443/x"}, "https://[::1]"},
		{"fallback-ipv6-port", []string{"https://[::1]:8443/x"}, "https://[::1]:8443"},
		{"storage-other-account", []string{"https://acct2.blob.core.windows.net/c/b", "https://ACCT2.blob.core.windows.net.:443/c/b"}, "storage:acct2/blob"},
		{"storage-other-service", []string{"https://acct.queue.core.windows.net/q"}, "storage:acct/queue"},
		{"arm-other-subscription", []string{"https://management.azure.com/subscriptions/ffffffff-0000-4000-8000-00000000abcd"}, "arm:management.azure.com/subscriptions/ffffffff-0000-4000-8000-00000000abcd"},
		{"openai-other-deployment", []string{"https://res.openai.azure.com/openai/deployments/gpt-4o-mini/chat/completions"}, "openai:res/gpt-4o-mini"},
		{"azurite", []string{"http://127.0.0.1:10000/devstoreaccount1/c", "http://LOCALHOST.:10000/DevStoreAccount1/c"}, "storage:devstoreaccount1/blob"},
		// Two trailing dots spell no DNS name: kept as spelt, so that the
		// canonical spelling is its own.
		{"two-trailing-dots", []string{"https://acct.blob.core.windows.net../c", "https://ACCT.blob.core.windows.net..:443/c"}, "https://acct.blob.core.windows.net.."},
	}
}

// TestDefaultScopeSpellings: WithSharedRestrictions(nil)'s scope (scheme
// and host) names one host once, as AzureScope's last case does (R102).
func TestDefaultScopeSpellings(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"https://host.example/a", "https://host.example"},
		{"HTTPS://Host.Example/a", "https://host.example"},
		{"https://host.example./a", "https://host.example"},
		{"https://host.example:443/a", "https://host.example"},
		{"http://host.example:80/a", "http://host.example"},
		{"https://host.example:8443/a", "https://host.example:8443"},
		{"http://host.example:443/a", "http://host.example:443"},
		{"http://127.0.0.1:10000/a", "http://127.0.0.1:10000"},
	} {
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := schemeHost(req); got != tc.want {
			t.Errorf("schemeHost(%s) = %q, want %q", tc.url, got, tc.want)
		}
	}
}
