// Package fakeserver is a scriptable, in-memory fake of the Azure surfaces
// the read-recovery transport serves (AI Search indexes, a File service,
// Blob checkpoints, and an OpenAI-compatible Files and vector-store API),
// with a ledger of every request it saw and a proxy mode ([NewProxy]) that
// injects the same faults in front of a real upstream such as Azurite. It
// imports only the standard library.
//
// # Endpoints
//
//	PUT /indexes/{name}   search.put   JSON index definition; 201 created, 200 replaced,
//	                                   the stored definition echoed (with "name" and
//	                                   "@odata.etag"); 204 with "Prefer: return=minimal";
//	                                   If-Match / If-None-Match: * honoured (412)
//	GET /indexes/{name}   search.get   200 and the definition, 404 with
//	                                   {"error":{"code":"ResourceNotFound","message":...}}
//	POST /files           file.upload  201 and {"id","name","digest","bytes","created_at"};
//	                                   the body is kept by its SHA-256 digest, the optional
//	                                   x-ms-file-name header names the file
//	GET /files            file.list    ?limit=N (default 10, at most 1000: larger is
//	                                   clamped) &after=CURSOR: {"value":[...]} in stable
//	                                   upload order; when more remain, "next" holds the
//	                                   cursor (the last ID of the page) and "nextLink" the
//	                                   absolute URL of the next page
//	PUT /{container}/{blob}  blob.put  201 with ETag, Last-Modified, Content-MD5
//	GET /{container}/{blob}  blob.get  200 with the bytes, ETag, Content-Type;
//	                                   404 with an XML <Error> (BlobNotFound)
//	anything else         other        404 or 405 with an error body
//
// The OpenAI surface's routes are listed with [RouteOpenAIFileUpload].
// /indexes('{name}') works as /indexes/{name}; a blob name may hold
// slashes; a request with a "restype" query parameter is "other"; the
// api-version parameter is accepted, not required. Search and File errors
// are JSON, Blob errors XML, each with x-ms-error-code; a bad body is a 400,
// a body over 64 MiB a 413, and odd client input never panics the server.
// Every answer carries a fresh x-ms-request-id (Search routes also
// request-id) and a Date from the server's clock ([WithClock]). Each
// endpoint also answers behind Azurite's account segment,
// /{account}/{container}/{blob} ([WithAccount]); the fake's own routes are
// under [AdminPrefix].
//
// # Faults
//
// A [Script] holds rules. A rule matches requests by route name (or "*"),
// [Method] and [MatchPath], fires on its [Nth] matching request, the next
// [Times], or [Always] (the default), and, as Azure throttles, only inside
// a [Window] or when its [TokenBucket] has no token (kept [PerAccount],
// [PerHost], [PerSubscription] or [PerDeployment], optionally telling the
// tokens left with [QuotaHeaders]). The first rule that fires injects its
// [Fault]: [Throttle] (a 429 with any [RetryAfter] form, the remaining
// window or token wait included), [Status], [ServerBusy] (Storage's 503),
// [Redirect] and [ConnectionReset] replace the answer; [SlowBody] and
// [StalledBody] deliver it slowly or never.
//
//	srv.Script().Add(fakeserver.RouteBlobGet,
//		fakeserver.Throttle(fakeserver.RetryAfterRemaining()), fakeserver.TokenBucket(200, 50))
//
// [Server.Requests] is the ledger: one [Request] per request, with the
// [Decision] of every rule by time or by rate asked about it;
// [Server.Count], [Server.AssertNoMutationSentTwice] and [Server.AssertGap]
// check it.
//
// # Running
//
// [Server.Start] serves on a loopback listener; [Server.Transport] serves
// in-process, without sockets, so that inside testing/synctest a scripted
// 2 s slow body takes 2 s of fake time and no real time. The command
// "readrecovery fakeserver" runs the fake or the proxy from the shell with
// a script, a seed and one rule by time or by rate from its flags.
//
// # JSON scripts
//
// [LoadScript] and [LoadScriptFile] read the same rules from JSON:
//
//	{
//	  "comment": "inventory: a 429 on page 3 and on page 5",
//	  "rules": [
//	    {"route": "file.list", "nth": 3, "fault": "throttle",
//	     "retry_after": {"form": "seconds", "seconds": 1}},
//	    {"route": "file.list", "nth": 5, "fault": "throttle",
//	     "retry_after": {"form": "rfc850", "seconds": 2}},
//	    {"route": "search.put", "times": 1, "fault": "throttle",
//	     "retry_after": {"form": "duplicate", "values": ["1", "2"]}, "body_size": 8388608},
//	    {"route": "blob.get", "path_prefix": "/devstoreaccount1/checkpoints/",
//	     "fault": "throttle", "retry_after": {"form": "imf-fixdate", "seconds": 1}},
//	    {"route": "file.upload", "always": true, "fault": "throttle",
//	     "retry_after": {"form": "missing"}},
//	    {"route": "*", "method": "DELETE", "fault": "status", "status": 503},
//	    {"route": "blob.get", "nth": 2, "fault": "redirect", "status": 307,
//	     "location": "https://elsewhere.example/c/b"},
//	    {"route": "search.get", "fault": "slow_body", "chunk": 16, "delay": "100ms"},
//	    {"route": "blob.get", "nth": 4, "fault": "stalled_body"},
//	    {"route": "other", "fault": "reset"}
//	  ]
//	}
//
// A script is an object with "rules" (an array, applied in order) and an
// optional "comment". A rule has:
//
//	route        required: a route name (search.put, search.get, file.upload, file.list,
//	             blob.put, blob.get, other, an openai.* route) or "*"
//	method       optional HTTP method (must agree with a named route)
//	path_prefix  optional decoded path prefix, starting with "/"
//	nth          optional 1-based ordinal of the first matching request it fires on
//	times        optional: fire at most this many times
//	always       optional true: fire on every matching request (the default
//	             when neither nth nor times is given); excludes times
//	window       optional {"start": RFC 3339 time (optional: the first request),
//	             "duration": Go duration (required, above 0)}: see [Window]
//	token_bucket optional {"rate": tokens per second, "burst": N, "key": "account"
//	             (default), "host", "subscription" or "deployment", "quota_headers":
//	             "openai" or "arm" (optional)}: see [TokenBucket]
//	fault        required: throttle, status, server_busy, redirect, slow_body,
//	             stalled_body, reset
//	retry_after  throttle (required): {"form": F, ...} where F is
//	               seconds      {"seconds": N}        "Retry-After: N"
//	               imf-fixdate, rfc850, asctime
//	                            {"seconds": N}        the server clock + N s (N may be < 0)
//	               raw          {"values": ["1.5"]}   exactly that one value
//	               duplicate    {"values": ["1","2"]} one header line per value
//	               missing      {}                    no Retry-After
//	               oversized    {"size": 200}         a 200-byte value (default 200)
//	               overlong     {"seconds": 60}       like seconds (default 60)
//	               remaining    {}                    the window's or bucket's wait, whole
//	                                                  seconds rounded up (needs a window
//	                                                  or a token_bucket)
//	               remaining-ms {}                    the same, and retry-after-ms
//	status       status: 400-599 but 429; redirect: 301, 302, 303, 307, 308
//	location     redirect (required): the Location value
//	body_size    throttle, status, server_busy: the exact error body length in bytes
//	chunk, delay slow_body (required): bytes per chunk and a Go duration ("100ms")
//	comment      optional, ignored
//
// Rules by time and by rate, and Storage's 503:
//
//	{
//	  "comment": "Azure-like throttling: a 2 s window, a per-account bucket, Storage's 503",
//	  "rules": [
//	    {"route": "file.list", "window": {"duration": "2s"}, "fault": "throttle",
//	     "retry_after": {"form": "remaining"}},
//	    {"route": "search.get", "window": {"start": "2026-12-01T10:00:00Z", "duration": "1m"},
//	     "fault": "throttle", "retry_after": {"form": "remaining-ms"}},
//	    {"route": "blob.get", "token_bucket": {"rate": 200, "burst": 50},
//	     "fault": "throttle", "retry_after": {"form": "remaining"}},
//	    {"route": "*", "token_bucket": {"rate": 20, "burst": 5, "key": "host"},
//	     "fault": "server_busy"}
//	  ]
//	}
//
// Scripts and seeds are decoded with encoding/json into typed structs,
// unknown keys refused (keys match without regard to case, as
// encoding/json does). A bad one fails with a [*LoadError] that names the
// entry and field with its line and column ("rules[2].retry_after.form
// (line 7, column 5): unknown Retry-After form ..."): where the decoder
// stopped for a syntax error or a value of the wrong type, else where the
// entry starts.
//
// # Seeds
//
// [Server.Seed] stores a [Seed] of indexes, files and blobs without a
// request (nothing in the ledger, no rule counts them), all or nothing;
// [LoadSeed] and [LoadSeedFile] read one from JSON:
//
//	{
//	  "comment": "a checkpoint, an index and a two-page inventory",
//	  "indexes": [
//	    {"name": "hotels", "definition": {"fields": [{"name": "id", "type": "Edm.String", "key": true}]}}
//	  ],
//	  "files": [
//	    {"name": "a.csv", "content": "id,name\n1,x\n"},
//	    {"name": "b.bin", "content_base64": "AAEC"}
//	  ],
//	  "blobs": [
//	    {"container": "checkpoints", "name": "c1/source.json", "json": {"source": 1}},
//	    {"container": "checkpoints", "name": "c1/raw.bin", "content_base64": "AAEC",
//	     "content_type": "application/x-raw"}
//	  ]
//	}
//
// Every key is optional; the sections are arrays, stored in order:
//
//	indexes[]  name (required; no "/" or "'"), definition (required: a JSON
//	           object, its "name", if any, equal to name)
//	files[]    name (optional x-ms-file-name), and the content
//	blobs[]    container (required; not "indexes", "files", "_fakeserver"),
//	           name (required; may hold "/"), the content, content_type
//	           (default application/octet-stream, application/json for json)
//	content    exactly one of: content (a string, stored as UTF-8),
//	           content_base64 (standard base64), json (any JSON value,
//	           stored compacted)
//	comment    optional string, at the top and in every entry, ignored
//
// Duplicate index names or blobs and a second content field are errors.
package fakeserver
