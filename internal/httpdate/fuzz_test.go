package httpdate

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Layouts of the three forms in the standard library's notation, GMT literal.
const (
	layoutIMF    = http.TimeFormat
	layoutRFC850 = "Monday, 02-Jan-06 15:04:05 GMT"
	layoutASC    = time.ANSIC
)

// FuzzParse checks Parse and Validate on any value and receipt time: no
// panic, only the package's errors, an accepted value is the canonical
// spelling of its result, and net/http.ParseTime agrees wherever both parsers
// accept. Its seed corpus (every table value) runs in every go test.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases() {
		f.Add(tc.v, tc.recv)
	}
	f.Add("Sun, 06 Nov 1994 8:49:37 GMT", t1994) // net/http accepts a 1-digit hour
	f.Add("Sun Nov 6 08:49:37 1994", t1994)      // and an unpadded asctime day
	f.Add("sun, 06 NOV 1994 08:49:37 GMT", t1994)

	f.Fuzz(func(t *testing.T, v string, recv int64) {
		got, form, err := Parse(v, recv)
		vform, verr := Validate(v)
		for _, e := range []error{err, verr} {
			var de Error
			if e != nil && (!errors.As(e, &de) || !knownError(de)) {
				t.Fatalf("%q: error %v is not one of the package's", v, e)
			}
		}
		if form != vform && !errors.Is(err, ErrYearUnresolvable) {
			// Validate stops early only for RFC 850 ranges, never on layout.
			t.Fatalf("%q: Parse form %v, Validate form %v", v, form, vform)
		}
		if errors.Is(verr, ErrYearUnresolvable) {
			t.Fatalf("%q: Validate cannot know the year", v)
		}
		if err == nil && verr != nil {
			t.Fatalf("%q: Parse accepts, Validate refuses: %v", v, verr)
		}
		if err != nil {
			if got != 0 {
				t.Fatalf("%q: error %v with time %d", v, err, got)
			}
			checkRefusal(t, v, form, err)
			return
		}
		checkCanonical(t, v, form, got)
		checkAgainstNetHTTP(t, v, form, got)
	})
}

func knownError(e Error) bool {
	switch e {
	case ErrLayout, ErrDayName, ErrMonth, ErrDigits, ErrDayRange, ErrClock, ErrZone, ErrWeekday, ErrYearUnresolvable:
		return true
	}
	return false
}

// checkCanonical: an accepted value is exactly how its instant is written in
// its form, up to a zero-padded asctime day and the leap second.
func checkCanonical(t *testing.T, v string, form Form, got int64) {
	t.Helper()
	at := time.Unix(got, 0).UTC()
	if strings.Contains(v, ":60 ") {
		at = at.Add(-time.Second) // 23:59:60 is read as the next 00:00:00
		v = strings.Replace(v, ":60 ", ":59 ", 1)
	}
	var want string
	switch form {
	case FormIMFFixdate:
		want = at.Format(layoutIMF)
	case FormRFC850:
		want = at.Format(layoutRFC850)
	case FormASCTime:
		want = at.Format(layoutASC)
		if v[8] == '0' {
			want = want[:8] + "0" + want[9:]
		}
	default:
		t.Fatalf("%q accepted with form %v", v, form)
	}
	if v != want {
		t.Fatalf("%q accepted as %d, which is written %q", v, got, want)
	}
}

// checkAgainstNetHTTP: where Parse accepts a value, http.ParseTime accepts it
// too (but for the leap second it refuses) with the same instant; an RFC 850
// year may differ by whole centuries, as the two resolve two-digit years
// differently.
func checkAgainstNetHTTP(t *testing.T, v string, form Form, got int64) {
	t.Helper()
	if strings.Contains(v, ":60 ") {
		return
	}
	std, err := http.ParseTime(v)
	if err != nil {
		t.Fatalf("%q accepted as %d, net/http refuses: %v", v, got, err)
	}
	ours := time.Unix(got, 0).UTC()
	if form == FormRFC850 {
		std = std.UTC()
		if ours.Year()%100 != std.Year()%100 || ours.Month() != std.Month() || ours.Day() != std.Day() ||
			ours.Format(time.TimeOnly) != std.Format(time.TimeOnly) {
			t.Fatalf("%q: %v, net/http %v", v, ours, std)
		}
		return
	}
	if !std.Equal(ours) {
		t.Fatalf("%q: %v, net/http %v", v, ours, std)
	}
}

// checkRefusal: where net/http accepts a value that is the canonical spelling
// of its result, Parse refuses it only for a reason net/http does not check
// (the weekday) or, for RFC 850, a different century.
func checkRefusal(t *testing.T, v string, form Form, err error) {
	t.Helper()
	std, serr := http.ParseTime(v)
	if serr != nil {
		return
	}
	std = std.UTC()
	canonical := std.Format(layoutIMF) == v || std.Format(layoutASC) == v || std.Format(layoutRFC850) == v
	if !canonical {
		return // net/http is lenient: case, padding, a non-GMT zone name
	}
	if form == FormRFC850 {
		// Received at its own instant, the two-digit year is net/http's.
		if got, _, err := Parse(v, std.Unix()); err != nil || got != std.Unix() {
			t.Fatalf("%q at its own instant: %d, %v; net/http %v", v, got, err, std)
		}
		return
	}
	t.Fatalf("%q refused (%v), net/http accepts it as %v", v, err, std)
}
