package readrecovery

import (
	"net/http"
	"net/url"
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
// host and the path segments named above, lower-cased; a segment that is
// no Azure name (ASCII letters, digits, '-', '_', '.') gives the next
// wider scope. One unit has one
// scope however its host is spelt: the scheme and host are lower-cased,
// one trailing dot of the host and the scheme's default port (443 for
// https, 80 for http) are dropped, and another port is kept in the scheme
// and host scope.
func AzureScope(req *http.Request) string {
	if req == nil || req.URL == nil {
		return ""
	}
	scheme := lowerASCII(req.URL.Scheme)
	name, port := canonicalHost(scheme, req.URL)
	path := req.URL.Path
	switch {
	case isARMHost(name):
		if id := segmentAfter(path, "subscriptions"); id != "" {
			return "arm:" + name + "/subscriptions/" + id
		}
		return "arm:" + name
	case strings.HasSuffix(name, ".openai.azure.com"), strings.HasSuffix(name, ".cognitiveservices.azure.com"):
		resource, _, _ := strings.Cut(name, ".")
		if d := segmentAfter(path, "deployments"); d != "" && hasPrefixFold(path, "/openai/") {
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
	if account, service, ok := azuriteAccount(name, port, path); ok {
		return "storage:" + account + "/" + service
	}
	return hostScope(scheme, req.URL.Host, name, port)
}

// schemeHost is the default scope of [WithSharedRestrictions]: the
// request's scheme and host, spelt once as AzureScope's last case spells
// them (lower case, no trailing dot, no default port).
func schemeHost(req *http.Request) string {
	if u := req.URL; (u.Scheme == "https" || u.Scheme == "http") && plainHost(u.Host) {
		return u.Scheme + "://" + u.Host // spelt once already: the usual case
	}
	scheme := lowerASCII(req.URL.Scheme)
	name, port := canonicalHost(scheme, req.URL)
	return hostScope(scheme, req.URL.Host, name, port)
}

// plainHost reports whether host is a name spelt as schemeHost spells it,
// with no port: lower case, not empty, not ending in a dot, no ':' or '['.
func plainHost(host string) bool {
	if host == "" || host[len(host)-1] == '.' {
		return false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; 'A' <= c && c <= 'Z' || c == ':' || c == '[' {
			return false
		}
	}
	return true
}

// hostScope is the scope scheme://name:port of a URL whose host is host,
// host itself when it is spelt so already (no allocation).
func hostScope(scheme, host, name, port string) string {
	if !isHostPort(host, name, port) {
		host = joinHostPort(name, port)
	}
	return scheme + "://" + host
}

// canonicalHost returns u's host name, lower-cased (ASCII: DNS names
// compare so) and without the trailing dot of a fully qualified name, and
// its port, "" when none or the scheme's default. A name ending in two
// dots is no DNS name and keeps them (dropping one would spell another
// name that drops one more: the canonical spelling must be its own). It
// allocates only for a name with upper case.
func canonicalHost(scheme string, u *url.URL) (name, port string) {
	name, port = u.Hostname(), u.Port()
	if n, ok := strings.CutSuffix(name, "."); ok && !strings.HasSuffix(n, ".") {
		name = n
	}
	name = lowerASCII(name)
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		port = ""
	}
	return name, port
}

// joinHostPort is [net.JoinHostPort] where an empty port means none.
func joinHostPort(name, port string) string {
	if strings.IndexByte(name, ':') >= 0 {
		name = "[" + name + "]"
	}
	if port == "" {
		return name
	}
	return name + ":" + port
}

// isHostPort reports whether host is joinHostPort(name, port), without
// building it: a host spelt canonically, the usual case, is used as it is.
func isHostPort(host, name, port string) bool {
	open, closing := "", ""
	if strings.IndexByte(name, ':') >= 0 {
		open, closing = "[", "]"
	}
	rest, ok := strings.CutPrefix(host, open)
	if ok {
		rest, ok = strings.CutPrefix(rest, name)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, closing)
	}
	if !ok {
		return false
	}
	if port == "" {
		return rest == ""
	}
	rest, ok = strings.CutPrefix(rest, ":")
	return ok && rest == port
}

// lowerASCII is s with ASCII upper case lowered; s itself, unallocated,
// when it has none.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			var b strings.Builder
			b.Grow(len(s))
			b.WriteString(s[:i])
			for ; i < len(s); i++ {
				c := s[i]
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				b.WriteByte(c)
			}
			return b.String()
		}
	}
	return s
}

// hasPrefixFold is strings.HasPrefix, ignoring case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
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
func azuriteAccount(h, port, path string) (account, service string, ok bool) {
	if h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return "", "", false
	}
	service, ok = azuriteServices[port]
	if !ok {
		return "", "", false
	}
	seg, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !isName(seg) {
		return "", "", false
	}
	return lowerASCII(seg), service, true
}

// segmentAfter returns the path segment that follows the segment key
// (case-insensitive), lower-cased; "" when there is none or it is no name.
func segmentAfter(path, key string) string {
	rest := strings.TrimPrefix(path, "/")
	for rest != "" {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		if strings.EqualFold(seg, key) {
			next, _, _ := strings.Cut(rest, "/")
			if !isName(next) {
				return ""
			}
			return lowerASCII(next)
		}
	}
	return ""
}

// isName reports whether a path segment can be the name of an Azure unit:
// a subscription ID, a deployment or a Storage account holds only ASCII
// letters, digits, '-', '_' and '.'. Another segment names no unit (the
// scope is the next wider one), so that nothing else of a path, such as a
// decoded '?' or an '@', reaches a scope.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
