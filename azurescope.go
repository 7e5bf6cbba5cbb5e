package readrecovery

import (
	"net"
	"net/http"
	"strings"
)

// AzureScope is a scope function for [WithSharedRestrictions] that names
// the unit Azure throttles by (docs/policy.md: azure-scopes), not the host:
//
//   - Resource Manager (management.azure.com and the sovereign clouds'
//     management hosts): the subscription in the path,
//     "arm:{host}/subscriptions/{id}"; a request outside a subscription,
//     the host ("arm:{host}").
//   - Storage ({account}.blob|queue|file|table|dfs.core.windows.net and the
//     sovereign suffixes; Azurite's 127.0.0.1:10000/{account} style): the
//     account and service, "storage:{account}/{service}".
//   - Azure OpenAI ({resource}.openai.azure.com,
//     {resource}.cognitiveservices.azure.com, /openai/deployments/{name}/...):
//     the resource and deployment, "openai:{resource}/{deployment}"; a
//     request of no deployment, the resource.
//   - AI Search ({service}.search.windows.net): the service,
//     "search:{service}".
//   - anything else: the scheme and host, as the default scope.
//
// A scope never holds a query, user information or a fragment: only the
// host and the path segments named above, lower-cased.
func AzureScope(req *http.Request) string {
	if req == nil || req.URL == nil {
		return ""
	}
	host := strings.ToLower(req.URL.Host)
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	path := req.URL.Path
	switch {
	case isARMHost(name):
		if id := segmentAfter(path, "subscriptions"); id != "" {
			return "arm:" + name + "/subscriptions/" + id
		}
		return "arm:" + name
	case strings.HasSuffix(name, ".openai.azure.com"), strings.HasSuffix(name, ".cognitiveservices.azure.com"):
		resource, _, _ := strings.Cut(name, ".")
		if d := segmentAfter(path, "deployments"); d != "" && strings.HasPrefix(strings.ToLower(path), "/openai/") {
			return "openai:" + resource + "/" + d
		}
		return "openai:" + resource
	case strings.HasSuffix(name, ".search.windows.net"):
		service, _, _ := strings.Cut(name, ".")
		return "search:" + service
	}
	if account, service, ok := storageHost(name); ok {
		return "storage:" + account + "/" + service
	}
	if account, service, ok := azuriteAccount(host, path); ok {
		return "storage:" + account + "/" + service
	}
	return schemeHost(req)
}

// armHosts are Resource Manager's hosts: the public cloud and the
// sovereign ones (US Government, China, Germany).
var armHosts = [...]string{
	"management.azure.com",
	"management.usgovcloudapi.net",
	"management.chinacloudapi.cn",
	"management.microsoftazure.de",
}

func isARMHost(h string) bool {
	for _, a := range armHosts {
		if h == a {
			return true
		}
	}
	return false
}

// storageSuffixes are the Storage endpoints' DNS suffixes after the
// service label.
var storageSuffixes = [...]string{
	".core.windows.net",
	".core.usgovcloudapi.net",
	".core.chinacloudapi.cn",
	".core.cloudapi.de",
}

// storageServices are Storage's service labels.
var storageServices = [...]string{"blob", "queue", "file", "table", "dfs"}

// storageHost reads {account}.{service}[-secondary].{suffix}.
func storageHost(h string) (account, service string, ok bool) {
	for _, suf := range storageSuffixes {
		rest, found := strings.CutSuffix(h, suf)
		if !found {
			continue
		}
		i := strings.LastIndexByte(rest, '.')
		if i <= 0 {
			return "", "", false
		}
		account, service = rest[:i], rest[i+1:]
		for _, s := range storageServices {
			if service == s {
				return strings.TrimSuffix(account, "-secondary"), service, true
			}
		}
		return "", "", false
	}
	return "", "", false
}

// azuriteServices are Azurite's default ports.
var azuriteServices = map[string]string{"10000": "blob", "10001": "queue", "10002": "table"}

// azuriteAccount reads the path-style account of a loopback Storage
// emulator: 127.0.0.1:10000/{account}/...
func azuriteAccount(hostPort, path string) (account, service string, ok bool) {
	h, port, err := net.SplitHostPort(hostPort)
	if err != nil || (h != "127.0.0.1" && h != "localhost" && h != "::1") {
		return "", "", false
	}
	service, ok = azuriteServices[port]
	if !ok {
		return "", "", false
	}
	seg, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if seg == "" {
		return "", "", false
	}
	return strings.ToLower(seg), service, true
}

// segmentAfter returns the path segment that follows the segment key
// (case-insensitive), lower-cased; "" when there is none.
func segmentAfter(path, key string) string {
	rest := path
	for rest != "" {
		var seg string
		seg, rest, _ = strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		if strings.EqualFold(seg, key) {
			next, _, _ := strings.Cut(rest, "/")
			return strings.ToLower(next)
		}
		if rest == "" {
			break
		}
		rest = "/" + rest
	}
	return ""
}
