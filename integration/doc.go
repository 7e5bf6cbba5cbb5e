// Package integration holds the end-to-end tests of readrecovery with real
// clients: the Azure SDK for Go (azblob, shared-key and SAS auth, through
// the rrazure adapter) against the Azure Storage emulator Azurite, with the
// fakeserver proxy injecting 429s between them, and the spans exported over
// OTLP by the real exporter to a receiver that decodes the protobuf.
//
// It is a nested module so that the library's own go.mod stays small. Run it
// with ./ci.sh, or:
//
//	./azurite.sh install                      # once: Azurite into .azurite/
//	RR_REQUIRE_AZURITE=1 go test -count=1 ./...
//
// BenchmarkFleetCheckpoints (fleet_test.go) is issue 36's fleet of
// processes reading checkpoints from one account, for azcore, rr (no
// store) and rr with each scope store (rr-dir, rr-redis, rr-blob; issue
// 37); a plain go test runs only its harness check. BenchmarkFleetRestart
// (a member killed and restarted mid-run) and BenchmarkFleetStoreDown
// (the run's redis-server hung or stopped mid-run) are in
// fleetstore_test.go, beside their short tests. Run them with:
//
//	RR_REQUIRE_AZURITE=1 go test -run '^$' -bench BenchmarkFleetCheckpoints -benchtime 1x -count 3 -timeout 30m .
//	RR_REQUIRE_AZURITE=1 go test -run '^$' -bench 'BenchmarkFleet(Restart|StoreDown)' -benchtime 1x -timeout 30m .
//
// Without the emulator installed the Azurite tests skip, unless
// RR_REQUIRE_AZURITE=1, under which they fail. The rr-redis runs start a
// redis-server of their own (Debian's package) and skip without one,
// unless RR_REQUIRE_REDIS=1. RR_AZURITE_BLOB names
// another blob entry point (Azurite's dist/src/blob/main.js) to run.
package integration
