package readrecovery

import (
	"strconv"
	"strings"
	"testing"
)

// Header shapes of FuzzParseRetryAfterMs: bits 0-1 say what retry-after-ms
// holds, bits 2-3 what x-ms-retry-after-ms holds, bit 4 spells the keys in
// lower case.
const (
	raMsFuzzAbsent   = iota // no key
	raMsFuzzOne             // one key, one value
	raMsFuzzTwoVals         // one key, the value twice
	raMsFuzzTwoKeys         // the canonical and the lower-case key, one value each
	raMsFuzzLowerKey = 0x10
)

// FuzzParseRetryAfterMs compares parseRetryAfterMs with a reference written
// from its doc comment (strconv for the digits, strings.EqualFold-free key
// matching) on any two values and any shape of the two fields. Its seed
// corpus (every table value) runs in every go test.
func FuzzParseRetryAfterMs(f *testing.F) {
	for _, tc := range retryAfterMsCases() {
		for k, vs := range tc.h {
			if !raASCIIEqualFold(k, raMsName) && !raASCIIEqualFold(k, raXMsName) {
				continue
			}
			for _, v := range vs {
				f.Add(v, "2500", uint8(raMsFuzzOne))
				f.Add("2500", v, uint8(raMsFuzzOne<<2|raMsFuzzOne))
				f.Add(v, v, uint8(raMsFuzzTwoVals|raMsFuzzLowerKey))
			}
		}
	}
	f.Add("30000", "30001", uint8(raMsFuzzOne<<2|raMsFuzzOne))
	f.Add("1", "2", uint8(raMsFuzzTwoKeys<<2|raMsFuzzTwoKeys))

	f.Fuzz(func(t *testing.T, a, b string, shape uint8) {
		h := raHdr("5")
		fields := [2]struct {
			canonical, lower, value string
			shape                   uint8
		}{
			{"Retry-After-Ms", raMsName, a, shape & 3},
			{"X-Ms-Retry-After-Ms", raXMsName, b, shape >> 2 & 3},
		}
		var want [2]raMsRef
		for i, fd := range fields {
			key := fd.canonical
			if shape&raMsFuzzLowerKey != 0 {
				key = fd.lower
			}
			switch fd.shape {
			case raMsFuzzOne:
				h[key] = []string{fd.value}
				want[i] = raMsRefJudge(i, []string{fd.value}, 1)
			case raMsFuzzTwoVals:
				h[key] = []string{fd.value, fd.value}
				want[i] = raMsRefJudge(i, []string{fd.value, fd.value}, 1)
			case raMsFuzzTwoKeys:
				h[fd.canonical] = []string{fd.value}
				h[strings.ToUpper(fd.lower)] = []string{"1"}
				want[i] = raMsRefJudge(i, []string{fd.value, "1"}, 2)
			}
		}
		ms, kind, diag := parseRetryAfterMs(h)
		checkRetryAfterMsInvariants(t, ms, kind, diag)
		h.Set("Retry-After", a) // the transport reads all three in one pass
		checkWaitFieldsAgree(t, h, raT0)
		wantMs, wantKind, wantDiag := raMsRefCombine(want)
		if ms != wantMs || kind != wantKind || diag != wantDiag {
			t.Fatalf("retry-after-ms %q, x-ms-retry-after-ms %q, shape %#x: got %d %s %q, want %d %s %q",
				a, b, shape, ms, kind, diag, wantMs, wantKind, wantDiag)
		}
	})
}

// raMsRef is the reference outcome of one field.
type raMsRef struct {
	kind RetryAfterKind // "" when absent
	ms   int64
	diag string
}

func raMsRefJudge(i int, values []string, keys int) raMsRef {
	d := raMsDiags[i]
	for _, v := range values {
		if len(v) > 128 {
			return raMsRef{RetryAfterOversized, 0, d.oversized}
		}
	}
	switch {
	case keys > 1:
		return raMsRef{RetryAfterInvalid, 0, d.dupKeys}
	case len(values) > 1:
		return raMsRef{RetryAfterInvalid, 0, d.dupValues}
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return raMsRef{RetryAfterInvalid, 0, d.empty}
	}
	if strings.Trim(v, "0123456789") != "" {
		return raMsRef{RetryAfterInvalid, 0, d.notDigits}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > 30000 {
		return raMsRef{RetryAfterOverlong, 0, d.overlong}
	}
	return raMsRef{RetryAfterSeconds, n, ""}
}

func raMsRefCombine(f [2]raMsRef) (int64, RetryAfterKind, string) {
	rank := map[RetryAfterKind]int{"": 0, RetryAfterSeconds: 1, RetryAfterInvalid: 2, RetryAfterOverlong: 3, RetryAfterOversized: 4}
	top := f[0]
	if rank[f[1].kind] > rank[f[0].kind] {
		top = f[1]
	}
	floor := max(f[0].ms, f[1].ms) // 0 unless valid
	switch top.kind {
	case "":
		return 0, RetryAfterMissing, ""
	case RetryAfterOverlong, RetryAfterOversized:
		return 0, top.kind, top.diag
	default:
		return floor, top.kind, top.diag
	}
}
