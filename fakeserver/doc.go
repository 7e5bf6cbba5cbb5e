// Package fakeserver is a scriptable, in-memory fake of the three Azure
// surfaces the read-recovery transport serves (AI Search indexes, a File
// service, Blob checkpoints), with a ledger of every request it saw and a
// proxy mode that injects the same faults in front of a real upstream such
// as Azurite. It is a plain net/http fake: it imports only the standard
// library, and nothing of the readrecovery module.
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
// The OpenAI-compatible surface (the Files API and vector-store file
// batches as openai-go parses them, under /v1, /openai and /openai/v1, with
// Azure OpenAI's throttling headers: [Server.ThrottleOpenAI]) is described
// with its route names, [RouteOpenAIFileUpload] and the others.
//
// /indexes('{name}') works as /indexes/{name}. A blob name may hold
// slashes. A request with a "restype" query parameter (container and
// service operations) is "other". The api-version parameter is accepted,
// not required. Search and File errors are JSON, Blob errors XML, each with
// x-ms-error-code. A bad body is a 400 with an error body; a body over
// 64 MiB a 413; the server never panics on odd client input.
//
// Every answer carries a fresh x-ms-request-id (Search routes also
// request-id; UUID-shaped, unique per server, increasing; not the admin
// routes') and a Date header from the server's clock ([WithClock]; default
// time.Now, which inside a testing/synctest bubble is the bubble's fake
// clock).
//
// # Path layouts
//
// Every endpoint answers in the plain layout above and in Azurite's
// path-style layout, behind an account segment: /{account}/{container}/{blob},
// /{account}/files, /{account}/indexes/{name}. Both reach the same state,
// so [Server.PutBlob]("checkpoints", "a.json", ...) is read by azblob at
// /devstoreaccount1/checkpoints/a.json and by a plain client at
// /checkpoints/a.json. The account segment is recognised by name, never by
// guessing: a first path segment exactly equal to the configured account
// ([WithAccount]; default [DefaultAccount], "devstoreaccount1", Azurite's)
// is the account, and then always is; any other path is plain. So a
// container literally named devstoreaccount1 is reached only as
// /devstoreaccount1/devstoreaccount1/{blob}, and WithAccount("") turns the
// account layout off. The ledger and [MatchPath] see the whole path, account
// segment included.
//
// # Faults
//
// A [Script] holds rules. A rule matches requests by route name (or "*"),
// optionally by method ([Method]) and decoded path prefix ([MatchPath]), and
// fires on its [Nth] matching request, on the next n ([Times]), or on every
// one ([Always], the default). The first rule (in order) that fires injects
// its [Fault]:
//
//   - [Throttle]: 429 with a Retry-After built from the server's clock:
//     [RetryAfterSeconds], [RetryAfterDate] (IMF-fixdate, RFC 850 or asctime,
//     clock + d), [RetryAfterRaw] (malformed, or several values: duplicate
//     fields), [RetryAfterMissing], [RetryAfterOversized] (n bytes),
//     [RetryAfterOverlong] (such as 60 s). [Fault.WithBodySize] makes the 429
//     body, for instance, 8 MiB. With Always it is a persistent 429; on
//     "file.upload" it is the queue-429.
//   - [Status]: 500, 503 or another error status.
//   - [ServerBusy]: 503 with Azure Storage's ServerBusy XML error body and
//     x-ms-error-code, and no Retry-After.
//   - [Redirect]: 301, 302, 303, 307 or 308 with a Location.
//   - [SlowBody]: the normal answer, its body trickled chunk by chunk.
//   - [StalledBody]: the normal answer's headers, then no body until the
//     client goes away or the server closes.
//   - [ConnectionReset]: no answer; a TCP RST, or an ECONNRESET error
//     in-process.
//
// Throttle, Status, ServerBusy, Redirect and ConnectionReset replace the
// answer: the in-memory service (or the proxy's upstream) never sees the
// request, as with a real gateway's 429. [RetryAfter.Values] gives the
// exact header bytes a client receives, so a test can assert them.
//
// # Rules by time and by rate
//
// Azure throttles for a time or at a rate, not on the n-th request. Two
// more rule options say so, on the server's clock (so a test drives them
// with [WithClock] or inside a testing/synctest bubble):
//
//   - [Window](start, d): the rule fires on every request it matches that
//     arrives in [start, start+d); a zero start opens the window at the
//     first request it is asked about.
//   - [TokenBucket](rate, burst): the rule fires on the requests that find
//     no token in their bucket (burst tokens, full at first, refilled at
//     rate per second; a passing request takes one), one bucket per
//     storage account ([PerAccount], the default) or per host
//     ([PerHost]). A rule keeps at most 4,096 buckets.
//
// With [Throttle]([RetryAfterRemaining]()) the 429's Retry-After is the
// window's remaining time, or the time to the bucket's next token, in
// whole seconds rounded up; [RetryAfterRemainingMs] adds Azure OpenAI's
// retry-after-ms (whole milliseconds, rounded up). With [ServerBusy] the
// same rules throttle as Azure Storage does, with 503s. A window or a
// bucket is one more condition besides [Nth] and [Times] (all must hold);
// a bucket rule is asked only about requests no earlier rule answered, so
// those take no token.
//
//	srv.Script().Add(fakeserver.RouteBlobGet,
//		fakeserver.Throttle(fakeserver.RetryAfterRemaining()), fakeserver.TokenBucket(200, 50))
//
// # Ledger
//
// [Server.Requests] returns every request in arrival order: method, route,
// decoded path, the query's parameter names (values, such as a SAS "sig",
// are never kept), arrival time on the server clock, the request ID
// answered, the status, the fault injected and the body's SHA-256 digest,
// and the [Decision] of every rule by time or by rate asked about it (which
// rule, the bucket's key and the tokens left, the window's end, the wait).
// [Server.Count], [Server.AssertNoMutationSentTwice] (with [AllowResend]
// for the queue route's one re-send) and [Server.AssertGap] ("the request
// after the 429 came at least d later") check it.
//
// # Admin routes
//
// Under [AdminPrefix] the fake answers about itself, not as Azure:
//
//	GET /_fakeserver/health  200 {"status":"ok","requests":N}  a readiness probe
//	GET /_fakeserver/ledger  200 {"requests":[...]}           the ledger as JSON
//
// They are not Azure traffic: never in the ledger, never shown to the
// observer, never matched against the script (so a probe curl does not use
// up a rule's nth), never forwarded by a proxy.
//
// # Running
//
// [Server.Start] serves on a loopback listener (127.0.0.1:0) and returns
// its URL; [Server.Close] or [Server.Shutdown] stops it. [Server.Transport]
// serves in-process, without sockets: use it inside testing/synctest, where
// a scripted 2 s slow body takes exactly 2 s of fake time and no real time
// (create the Server inside the bubble, so that its clock and channels are
// the bubble's).
// [NewProxy] puts the rules in front of a real upstream; the command
// "readrecovery fakeserver" runs either from the shell (--script FILE,
// --seed FILE for the fake, --upstream URL for the proxy, --account NAME;
// --window, --window-start, --token-bucket, --bucket-key, --retry-after-ms,
// --server-busy and --route add a rule by time or by rate), and a shell
// probes it with "curl http://HOST:PORT/_fakeserver/health".
//
// # JSON scripts
//
// [LoadScript] and [LoadScriptFile] read the same rules from JSON, for the
// command's --script flag:
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
//	route        required: search.put, search.get, file.upload, file.list,
//	             blob.put, blob.get, other, or "*"
//	method       optional HTTP method (must agree with a named route)
//	path_prefix  optional decoded path prefix, starting with "/"
//	nth          optional 1-based ordinal of the first matching request it fires on
//	times        optional: fire at most this many times
//	always       optional true: fire on every matching request (the default
//	             when neither nth nor times is given); excludes times
//	window       optional {"start": RFC 3339 time (optional: the first request),
//	             "duration": Go duration (required, above 0)}: see [Window]
//	token_bucket optional {"rate": tokens per second, "burst": N,
//	             "key": "account" (default) or "host"}: see [TokenBucket]
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
// Scripts are decoded with encoding/json into typed structs, unknown keys
// refused (keys match without regard to case, as encoding/json does). A
// bad script fails with a [*LoadError] that names the rule and field with
// its line and column ("rules[2].retry_after.form (line 7, column 5):
// unknown Retry-After form ..."): where the decoder stopped for a syntax
// error or a value of the wrong type, else where the rule starts.
//
// # Seeds
//
// [Server.Seed] stores indexes, files and blobs without a request (nothing
// in the ledger, no rule counts them); [LoadSeed] and [LoadSeedFile] read a
// [Seed] from JSON, for the command's --seed flag:
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
// A seeded blob is reached through both path layouts. Unknown keys,
// duplicate index names or blobs, and a second content field are errors: a
// bad seed fails with the same [*LoadError], naming the entry and field
// ("blobs[1].container (line 7, column 5): required"), and [Server.Seed] stores nothing of a seed it refuses.
//
// # Example
//
//	func TestInventory(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			srv := fakeserver.New()
//			defer srv.Close()
//			for i := range 25 {
//				srv.AddFile(fmt.Sprintf("f%02d", i), []byte{byte(i)})
//			}
//			srv.Script().Add(fakeserver.RouteFileList,
//				fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(2))
//			client := &http.Client{Transport: srv.Transport()}
//			// ... list the inventory through the transport under test ...
//			srv.AssertGap(t, fakeserver.RouteFileList, 2, 2*time.Second)
//			srv.AssertNoMutationSentTwice(t)
//			_ = client
//		})
//	}
package fakeserver
