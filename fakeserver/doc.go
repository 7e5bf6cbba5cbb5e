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
// tokens left with [QuotaHeaders]: Azure OpenAI's remaining count and its
// reset, the time to a full bucket, or Resource Manager's remaining count
// without a reset). The first rule that fires injects its [Fault]:
// [Throttle] (a 429 with any [RetryAfter] form, the remaining
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
// # JSON scripts and seeds
//
// [LoadScript] and [LoadScriptFile] read the same rules from JSON, and
// [LoadSeed] and [LoadSeedFile] a [Seed] of indexes, files and blobs that
// [Server.Seed] stores without a request; a bad one fails with a
// [*LoadError]. The formats, with examples, are in docs/fakeserver.md:
// https://github.com/readrecovery/readrecovery/blob/main/docs/fakeserver.md
package fakeserver
