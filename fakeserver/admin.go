package fakeserver

import (
	"net/http"
	"strings"
)

// AdminPrefix starts the path of the fake's own routes, which are not Azure
// traffic:
//
//	GET /_fakeserver/health  200 {"status":"ok","requests":N}, N the ledger's length
//	GET /_fakeserver/ledger  200 {"requests":[...]}, the ledger ([Server.Requests]) as JSON
//
// (HEAD too; another method is a 405, another path a 404). They are
// answered by the fake itself, in proxy mode too, and are never in the
// ledger, shown to the observer or matched against the script, so a
// readiness probe uses up no rule's count. No Azure container name starts
// with "_".
const AdminPrefix = "/_fakeserver/"

// isAdmin reports whether p is an admin path: /_fakeserver or below it.
func isAdmin(p string) bool {
	return p == strings.TrimSuffix(AdminPrefix, "/") || strings.HasPrefix(p, AdminPrefix)
}

// ledgerBody is the JSON of GET /_fakeserver/ledger.
type ledgerBody struct {
	Requests []Request `json:"requests"`
}

// serveAdmin answers a request under AdminPrefix.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	var resp *response
	switch r.URL.Path {
	case AdminPrefix + "health", AdminPrefix + "ledger":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			resp = jsonError(http.StatusMethodNotAllowed, "MethodNotAllowed",
				"The method "+sanitizeMethod(r.Method)+" is not allowed on this resource.")
			resp.header.Set("Allow", "GET, HEAD")
			break
		}
		reqs := s.Requests()
		if r.URL.Path == AdminPrefix+"health" {
			resp = jsonResponse(http.StatusOK, struct {
				Status   string `json:"status"`
				Requests int    `json:"requests"`
			}{"ok", len(reqs)})
		} else {
			resp = jsonResponse(http.StatusOK, ledgerBody{Requests: append([]Request{}, reqs...)})
		}
	default:
		resp = jsonError(http.StatusNotFound, "ResourceNotFound",
			"No such fakeserver route: want "+AdminPrefix+"health or "+AdminPrefix+"ledger.")
	}
	resp.header.Set("Cache-Control", "no-store")
	resp.header.Set("Date", s.now().UTC().Format(http.TimeFormat))
	s.emit(r.Context(), w, r, resp, Fault{})
}
