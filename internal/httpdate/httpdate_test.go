package httpdate

import (
	"errors"
	"math"
	"net/http"
	"testing"
	"time"
)

// Receipt times: the RFC 9110 example instant and a Saturday in 2026.
var (
	t1994 = time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC).Unix() // Sun, 06 Nov 1994 08:49:37 GMT
	t2026 = time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC).Unix()
)

func unix(y int, m time.Month, d, hh, mm, ss int) int64 {
	return time.Date(y, m, d, hh, mm, ss, 0, time.UTC).Unix()
}

type parseCase struct {
	name string
	v    string
	recv int64
	want int64 // when err is nil
	form Form
	err  error
}

func parseCases() []parseCase {
	return []parseCase{
		// The three forms of the RFC 9110 example.
		{"imf-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", t1994, t1994, FormIMFFixdate, nil},
		{"rfc850", "Sunday, 06-Nov-94 08:49:37 GMT", t1994, t1994, FormRFC850, nil},
		{"asctime space-padded day", "Sun Nov  6 08:49:37 1994", t1994, t1994, FormASCTime, nil},
		{"asctime zero-padded day", "Sun Nov 06 08:49:37 1994", t1994, t1994, FormASCTime, nil},
		{"imf-fixdate epoch", "Thu, 01 Jan 1970 00:00:00 GMT", t1994, 0, FormIMFFixdate, nil},
		{"imf-fixdate year 0000", "Sat, 01 Jan 0000 00:00:00 GMT", t1994, unix(0, 1, 1, 0, 0, 0), FormIMFFixdate, nil},
		{"imf-fixdate year 9999", "Fri, 31 Dec 9999 23:59:59 GMT", t1994, unix(9999, 12, 31, 23, 59, 59), FormIMFFixdate, nil},
		{"29 February 2000", "Tue, 29 Feb 2000 00:00:00 GMT", t1994, unix(2000, 2, 29, 0, 0, 0), FormIMFFixdate, nil},
		{"leap second is the next 00:00:00", "Sat, 31 Dec 2016 23:59:60 GMT", t1994, unix(2017, 1, 1, 0, 0, 0), FormIMFFixdate, nil},
		{"asctime leap second", "Sat Dec 31 23:59:60 2016", t1994, unix(2017, 1, 1, 0, 0, 0), FormASCTime, nil},
		{"longest day name rfc850", "Wednesday, 09-Nov-94 08:49:37 GMT", t1994, unix(1994, 11, 9, 8, 49, 37), FormRFC850, nil},

		// RFC 850 two-digit years against the receipt time.
		{"rfc850 70 seen from 2026 is 2070", "Wednesday, 01-Jan-70 00:00:00 GMT", t2026, unix(2070, 1, 1, 0, 0, 0), FormRFC850, nil},
		{"rfc850 77 seen from 2026 is 1977", "Saturday, 01-Jan-77 00:00:00 GMT", t2026, unix(1977, 1, 1, 0, 0, 0), FormRFC850, nil},
		{"rfc850 exactly 50 years ahead stays ahead", "Saturday, 14-Mar-76 12:00:00 GMT", t2026, unix(2076, 3, 14, 12, 0, 0), FormRFC850, nil},
		{"rfc850 50 years and 1 s ahead is the past century", "Sunday, 14-Mar-76 12:00:01 GMT", t2026, unix(1976, 3, 14, 12, 0, 1), FormRFC850, nil},
		{"rfc850 weekday checked in the resolved century", "Thursday, 01-Jan-70 00:00:00 GMT", t2026, 0, FormRFC850, ErrWeekday},
		{"rfc850 29 February 00 seen from 2026 is 2000, a leap year", "Tuesday, 29-Feb-00 00:00:00 GMT", t2026, unix(2000, 2, 29, 0, 0, 0), FormRFC850, nil},
		{"rfc850 29 February 00 seen from 2075 is 2100, not a leap year", "Monday, 29-Feb-00 00:00:00 GMT", unix(2075, 1, 1, 0, 0, 0), 0, FormRFC850, ErrDayRange},
		{"rfc850 year beyond 9999", "Sunday, 06-Nov-94 08:49:37 GMT", math.MaxInt64, 0, FormRFC850, ErrYearUnresolvable},
		{"rfc850 year before 0000", "Sunday, 06-Nov-94 08:49:37 GMT", math.MinInt64, 0, FormRFC850, ErrYearUnresolvable},
		{"rfc850 clock checked before the year", "Sunday, 06-Nov-94 24:00:00 GMT", math.MaxInt64, 0, FormRFC850, ErrClock},

		// Layout.
		{"empty", "", t1994, 0, FormUnknown, ErrLayout},
		{"delay-seconds", "120", t1994, 0, FormUnknown, ErrLayout},
		{"imf-fixdate one byte short", "Sun, 06 Nov 1994 08:49:37 GM", t1994, 0, FormUnknown, ErrLayout},
		{"imf-fixdate double space", "Sun, 06 Nov  1994 08:49:37 GMT", t1994, 0, FormUnknown, ErrLayout},
		{"imf-fixdate space-padded day", "Sun,  6 Nov 1994 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrDigits},
		{"imf-fixdate dashes", "Sun, 06-Nov-1994 08:49:37 GMT", t1994, 0, FormUnknown, ErrLayout},
		{"asctime with zone", "Sun Nov  6 08:49:37 1994 GMT", t1994, 0, FormUnknown, ErrLayout},
		{"asctime missing separator", "Sun Nov  6 08:49:37_1994", t1994, 0, FormUnknown, ErrLayout},
		{"rfc850 spaces for dashes", "Sunday, 06 Nov 94 08:49:37 GMT", t1994, 0, FormUnknown, ErrLayout},
		{"rfc850 day name too long", "Wednesdayy, 09-Nov-94 08:49:37 GMT", t1994, 0, FormUnknown, ErrLayout},
		{"rfc850 no comma", "Sunday 06-Nov-94 08:49:37 GMT", t1994, 0, FormUnknown, ErrLayout},

		// Names, digits, zone: exact and case-sensitive.
		{"upper-case day name", "SUN, 06 Nov 1994 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrDayName},
		{"long day name in imf-fixdate", "Sunday, 06 Nov 1994 08:49:37 GMT", t1994, 0, FormUnknown, ErrLayout},
		{"short day name in rfc850", "Sun, 06-Nov-94 08:49:37 GMT", t1994, 0, FormUnknown, ErrLayout},
		{"unknown long day name", "Sonday, 06-Nov-94 08:49:37 GMT", t1994, 0, FormRFC850, ErrDayName},
		{"asctime unknown day name", "Sum Nov  6 08:49:37 1994", t1994, 0, FormASCTime, ErrDayName},
		{"lower-case month", "Sun, 06 nov 1994 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrMonth},
		{"rfc850 unknown month", "Sunday, 06-Now-94 08:49:37 GMT", t1994, 0, FormRFC850, ErrMonth},
		{"asctime unknown month", "Sun Nvo  6 08:49:37 1994", t1994, 0, FormASCTime, ErrMonth},
		{"day not digits", "Sun, 0x Nov 1994 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrDigits},
		{"year not digits", "Sun, 06 Nov 19x4 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrDigits},
		{"clock separator", "Sun, 06 Nov 1994 08.49:37 GMT", t1994, 0, FormIMFFixdate, ErrDigits},
		{"clock not digits", "Sun, 06 Nov 1994 08:4x:37 GMT", t1994, 0, FormIMFFixdate, ErrDigits},
		{"rfc850 year not digits", "Sunday, 06-Nov-9x 08:49:37 GMT", t1994, 0, FormRFC850, ErrDigits},
		{"asctime two spaces for the day", "Sun Nov    08:49:37 1994", t1994, 0, FormASCTime, ErrDigits},
		{"asctime digit then space for the day", "Sun Nov 6  08:49:37 1994", t1994, 0, FormASCTime, ErrDigits},
		{"asctime year not digits", "Sun Nov  6 08:49:37 199x", t1994, 0, FormASCTime, ErrDigits},
		{"zone UTC", "Sun, 06 Nov 1994 08:49:37 UTC", t1994, 0, FormIMFFixdate, ErrZone},
		{"zone lower-case gmt", "Sun, 06 Nov 1994 08:49:37 gmt", t1994, 0, FormIMFFixdate, ErrZone},
		{"rfc850 zone EST", "Sunday, 06-Nov-94 08:49:37 EST", t1994, 0, FormRFC850, ErrZone},

		// Ranges and the weekday.
		{"hour 24", "Sun, 06 Nov 1994 24:00:00 GMT", t1994, 0, FormIMFFixdate, ErrClock},
		{"minute 60", "Sun, 06 Nov 1994 08:60:00 GMT", t1994, 0, FormIMFFixdate, ErrClock},
		{"second 61", "Sun, 06 Nov 1994 08:49:61 GMT", t1994, 0, FormIMFFixdate, ErrClock},
		{"second 60 outside 23:59", "Sat, 31 Dec 2016 23:58:60 GMT", t1994, 0, FormIMFFixdate, ErrClock},
		{"day 00", "Sun, 00 Nov 1994 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrDayRange},
		{"31 November", "Thu, 31 Nov 1994 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrDayRange},
		{"29 February 1900", "Thu, 29 Feb 1900 00:00:00 GMT", t1994, 0, FormIMFFixdate, ErrDayRange},
		{"asctime day 32", "Sun Jan 32 08:49:37 1994", t1994, 0, FormASCTime, ErrDayRange},
		{"weekday mismatch", "Mon, 06 Nov 1994 08:49:37 GMT", t1994, 0, FormIMFFixdate, ErrWeekday},
		{"asctime weekday mismatch", "Mon Nov  6 08:49:37 1994", t1994, 0, FormASCTime, ErrWeekday},
		{"rfc850 weekday mismatch", "Monday, 06-Nov-94 08:49:37 GMT", t1994, 0, FormRFC850, ErrWeekday},
	}
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, form, err := Parse(tc.v, tc.recv)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("Parse(%q) error = %v, want %v", tc.v, err, tc.err)
			}
			if form != tc.form {
				t.Errorf("form = %v, want %v", form, tc.form)
			}
			if got != tc.want {
				t.Errorf("Parse(%q) = %d (%v), want %d (%v)", tc.v, got, time.Unix(got, 0).UTC(), tc.want, time.Unix(tc.want, 0).UTC())
			}
		})
	}
}

// TestValidate: without a receipt time, IMF-fixdate and asctime are checked
// completely, RFC 850 as far as an unknown century allows.
func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		v    string
		form Form
		err  error
	}{
		{"imf-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", FormIMFFixdate, nil},
		{"imf-fixdate weekday mismatch", "Mon, 06 Nov 1994 08:49:37 GMT", FormIMFFixdate, ErrWeekday},
		{"imf-fixdate 29 February 1900", "Thu, 29 Feb 1900 00:00:00 GMT", FormIMFFixdate, ErrDayRange},
		{"asctime", "Sun Nov  6 08:49:37 1994", FormASCTime, nil},
		{"asctime clock", "Sun Nov  6 25:49:37 1994", FormASCTime, ErrClock},
		{"rfc850", "Sunday, 06-Nov-94 08:49:37 GMT", FormRFC850, nil},
		{"rfc850 weekday unchecked", "Monday, 06-Nov-94 08:49:37 GMT", FormRFC850, nil},
		{"rfc850 29 February passes", "Monday, 29-Feb-99 00:00:00 GMT", FormRFC850, nil},
		{"rfc850 30 February", "Monday, 30-Feb-00 00:00:00 GMT", FormRFC850, ErrDayRange},
		{"rfc850 clock before day range", "Monday, 30-Feb-00 24:00:00 GMT", FormRFC850, ErrClock},
		{"rfc850 zone", "Sunday, 06-Nov-94 08:49:37 UTC", FormRFC850, ErrZone},
		{"layout", "soon", FormUnknown, ErrLayout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			form, err := Validate(tc.v)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("Validate(%q) error = %v, want %v", tc.v, err, tc.err)
			}
			if form != tc.form {
				t.Errorf("form = %v, want %v", form, tc.form)
			}
		})
	}
}

func TestResolveRFC850Year(t *testing.T) {
	cases := []struct {
		name               string
		yy, mon, day, hour int64
		recv               int64
		want               int64
	}{
		{"same century", 94, 11, 6, 8, t1994, 1994},
		{"49 years ahead", 43, 1, 1, 0, t1994, 2043},
		{"50 years ahead, earlier in the year", 44, 1, 1, 0, t1994, 2044},
		{"50 years ahead, later in the year", 44, 12, 1, 0, t1994, 1944},
		{"51 years ahead is the past", 45, 1, 1, 0, t1994, 1945},
		{"receipt in year 1", 0, 1, 1, 0, unix(1, 6, 1, 0, 0, 0), 0},
		{"receipt before 1970", 69, 7, 20, 20, unix(1969, 7, 21, 0, 0, 0), 1969},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ResolveRFC850Year(tc.yy, tc.mon, tc.day, tc.hour, 0, 0, tc.recv); got != tc.want {
				t.Errorf("ResolveRFC850Year(%02d) = %d, want %d", tc.yy, got, tc.want)
			}
		})
	}
}

// TestRoundTrip formats instants across years 0001-9999 in the three forms
// with the standard library and parses them back exactly.
func TestRoundTrip(t *testing.T) {
	start := unix(1, 1, 1, 0, 0, 0)
	end := unix(9999, 12, 31, 23, 59, 59)
	n := 0
	for u := start; u <= end; u += 86400*917 + int64(n)*3607 {
		n++
		at := time.Unix(u, 0).UTC()
		forms := []struct {
			v    string
			form Form
		}{
			{at.Format(http.TimeFormat), FormIMFFixdate},
			{at.Format(time.ANSIC), FormASCTime},
			{at.Format("Monday, 02-Jan-06 15:04:05 GMT"), FormRFC850},
		}
		for _, f := range forms {
			got, form, err := Parse(f.v, u) // an RFC 850 date received at its own instant is this century
			if err != nil || got != u || form != f.form {
				t.Fatalf("Parse(%q) = %d, %v, %v; want %d, %v", f.v, got, form, err, u, f.form)
			}
		}
	}
	if n < 3000 {
		t.Fatalf("only %d samples", n)
	}
}

// TestNoAllocs: Parse and Validate allocate nothing, errors included.
func TestNoAllocs(t *testing.T) {
	for _, v := range []string{"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Mon, 06 Nov 1994 08:49:37 GMT", "soon"} {
		if n := testing.AllocsPerRun(100, func() { _, _, _ = Parse(v, t1994); _, _ = Validate(v) }); n != 0 {
			t.Errorf("Parse/Validate(%q): %v allocations, want 0", v, n)
		}
	}
}

func TestErrorsAreTyped(t *testing.T) {
	_, _, err := Parse("Sun, 06 Nov 1994 08:49:37 XYZ", t1994)
	var e Error
	if !errors.As(err, &e) || e != ErrZone {
		t.Fatalf("errors.As(%v) = %q, want ErrZone", err, e)
	}
	if err.Error() != "http-date zone not GMT" {
		t.Errorf("Error() = %q", err.Error())
	}
}

func TestFormString(t *testing.T) {
	for f, want := range map[Form]string{FormUnknown: "unknown", FormIMFFixdate: "imf-fixdate", FormRFC850: "rfc850", FormASCTime: "asctime", Form(9): "unknown"} {
		if got := f.String(); got != want {
			t.Errorf("Form(%d).String() = %q, want %q", f, got, want)
		}
	}
}

// The three forms and Validate, parsed without allocating (time.Date does
// the calendar arithmetic on the stack).
func BenchmarkParse(b *testing.B) {
	for _, v := range []string{"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"} {
		_, form, _ := Parse(v, t1994)
		b.Run(form.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Parse(v, t1994); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	for _, v := range []string{"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Mon, 06 Nov 1994 08:49:37 GMT"} {
		if n := testing.AllocsPerRun(100, func() { Parse(v, t1994); Validate(v) }); n != 0 {
			t.Errorf("%q: %v allocations", v, n)
		}
	}
}
