package unixtime

import (
	"testing"
	"time"
)

func TestMaxIsTheLastSecondOfYear9999(t *testing.T) {
	got := time.Unix(Max, 0).UTC().Format(time.RFC3339)
	if got != "9999-12-31T23:59:59Z" {
		t.Fatalf("Max formats as %s", got)
	}
	if next := time.Unix(Max+1, 0).UTC().Year(); next != 10000 {
		t.Fatalf("Max+1 is in year %d, want 10000", next)
	}
}

func TestRepresentable(t *testing.T) {
	for _, tc := range []struct {
		s    int64
		want bool
	}{{-1, false}, {0, true}, {Max, true}, {Max + 1, false}} {
		if got := Representable(tc.s); got != tc.want {
			t.Errorf("Representable(%d) = %v, want %v", tc.s, got, tc.want)
		}
	}
}
