package readrecovery

import (
	"net/http"
	"strings"
	"testing"
)

func TestAzureScope(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
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
	} {
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := AzureScope(req)
		if got != tc.want {
			t.Errorf("AzureScope(%s) = %q, want %q", tc.url, got, tc.want)
		}
		if strings.Contains(got, "SECRET") || strings.Contains(got, "?") || strings.Contains(got, "@") {
			t.Errorf("AzureScope(%s) = %q holds a secret", tc.url, got)
		}
	}
	if got := AzureScope(nil); got != "" {
		t.Errorf("AzureScope(nil) = %q", got)
	}
}
