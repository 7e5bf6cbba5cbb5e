// Package httpdate parses the three HTTP-date forms of RFC 9110 section
// 5.6.7 strictly and without allocating: IMF-fixdate
// ("Sun, 06 Nov 1994 08:49:37 GMT"), the obsolete RFC 850 form
// ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime ("Sun Nov  6 08:49:37 1994").
//
// Strict means: exactly the RFC's grammar. Day and month names are
// case-sensitive (the grammar's %s"..." strings); the zone is the literal
// "GMT" (asctime has none); every number has its fixed width (asctime's day
// is SP DIGIT or 2DIGIT); the weekday must be the one of the date; the date
// must exist in the proleptic Gregorian calendar; the time is at most
// 23:59:59, except the leap second 23:59:60, which is read as the following
// 00:00:00 (Unix time has no leap seconds, and reading it one second late
// never shortens a wait). The caller trims surrounding whitespace.
//
// An RFC 850 date has a two-digit year, so it can only be resolved against
// the time the message was received: [Parse] takes that time; [Validate]
// checks a value when it is unknown.
//
// Errors are constants of type [Error], to be told apart with errors.Is;
// none of them repeats the input, which usually comes from a server.
package httpdate

import "time"

// Form is the HTTP-date form of a value.
type Form uint8

// The three HTTP-date forms; FormUnknown is returned with [ErrLayout].
const (
	FormUnknown Form = iota
	FormIMFFixdate
	FormRFC850
	FormASCTime
)

// String returns the form's name in lower case, as diagnostics use it.
func (f Form) String() string {
	switch f {
	case FormIMFFixdate:
		return "imf-fixdate"
	case FormRFC850:
		return "rfc850"
	case FormASCTime:
		return "asctime"
	default:
		return "unknown"
	}
}

// Error is why [Parse] or [Validate] refused a value. It describes the
// problem only and never repeats the value, which usually comes from a
// server. The errors are constants, so returning one never allocates; tell
// them apart with [errors.Is].
type Error string

func (e Error) Error() string { return string(e) }

// The errors of [Parse] and [Validate]. [ErrYearUnresolvable] is the only
// one a well-formed value can get: its RFC 850 year resolves outside
// 0000-9999 for the given receipt time.
const (
	ErrLayout           Error = "http-date layout not imf-fixdate, rfc850 or asctime"
	ErrDayName          Error = "http-date day name unknown"
	ErrMonth            Error = "http-date month name unknown"
	ErrDigits           Error = "http-date number field not digits"
	ErrDayRange         Error = "http-date day of month out of range"
	ErrClock            Error = "http-date time of day out of range"
	ErrZone             Error = "http-date zone not GMT"
	ErrWeekday          Error = "http-date weekday does not match the date"
	ErrYearUnresolvable Error = "http-date rfc850 year unresolvable"
)

// Parse parses v, one HTTP-date in any of the three forms, and returns it in
// UTC Unix seconds with its form. receivedAtUnix is the receipt time of the
// message in UTC Unix seconds; only an RFC 850 date uses it, for its
// two-digit year (see [ResolveRFC850Year]).
//
// On error the form is the one v's layout announced (FormUnknown with
// [ErrLayout]) and the time is 0.
func Parse(v string, receivedAtUnix int64) (unix int64, form Form, err error) {
	var f fields
	if err := f.scan(v); err != nil {
		return 0, f.form, err
	}
	if !f.clockInRange() {
		return 0, f.form, ErrClock
	}
	if f.form == FormRFC850 {
		f.year = ResolveRFC850Year(f.year, f.mon, f.day, f.hour, f.min, f.sec, receivedAtUnix)
		if f.year < 0 || f.year > 9999 {
			return 0, f.form, ErrYearUnresolvable
		}
	}
	unix, err = f.resolve()
	return unix, f.form, err
}

// Validate checks v as [Parse] does when the receipt time is unknown. An
// IMF-fixdate or asctime value is checked completely. An RFC 850 value's
// century is unknown, so its weekday is not checked and 29 February passes;
// everything else is.
func Validate(v string) (Form, error) {
	var f fields
	if err := f.scan(v); err != nil {
		return f.form, err
	}
	if !f.clockInRange() {
		return f.form, ErrClock
	}
	if f.form == FormRFC850 {
		if f.day < 1 || f.day > daysIn(f.mon, 2000) {
			return f.form, ErrDayRange
		}
		return f.form, nil
	}
	_, err := f.resolve()
	return f.form, err
}

// ResolveRFC850Year returns the four-digit year of an RFC 850 date whose
// two-digit year is yy (0-99), month mon, day, hour, minute and second, for a
// message received at recv (UTC Unix seconds). RFC 9110 section 5.6.7: a
// timestamp that appears to be more than 50 years in the future is in the
// most recent past year with the same last two digits. So the year is the
// latest with those digits that puts the timestamp at most 50 years after the
// receipt; the 50 years are calendar years, so the receipt's own month, day
// and time 50 years on is still the future century.
//
// The result can lie outside 0000-9999 for a receipt time near the ends of
// the int64 range; [Parse] refuses such a year.
func ResolveRFC850Year(yy, mon, day, hour, minute, sec, recv int64) int64 {
	// Beyond about 126,000 years from 1970 every year resolves outside
	// 0000-9999; the bound keeps time.Unix within its range.
	recv = min(max(recv, -recvBound), recvBound)
	year, month, mday := time.Unix(recv, 0).UTC().Date()
	h, m, sc := time.Unix(recv, 0).UTC().Clock()
	ry := int64(year)
	last := ry % 100
	if last < 0 {
		last += 100
	}
	y := ry - last + yy
	for y > ry+50 {
		y -= 100
	}
	for y <= ry-50 {
		y += 100
	}
	if y == ry+50 {
		// Same calendar year 50 years on: later in the year is more than 50
		// years in the future.
		ts := ((mon*32+day)*24+hour)*3600 + minute*60 + sec
		rs := ((int64(month)*32+int64(mday))*24+int64(h))*3600 + int64(m)*60 + int64(sc)
		if ts > rs {
			y -= 100
		}
	}
	return y
}

// recvBound bounds the receipt time ResolveRFC850Year reads (Unix seconds).
const recvBound = 4_000_000_000_000

// fields are the syntactic parts of an HTTP-date.
type fields struct {
	form           Form
	wday           int // 0 = Sunday
	year, mon, day int64
	hour, min, sec int64
}

var (
	shortDays = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	longDays  = [7]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months    = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// scan reads the fields of v in whichever form its layout announces and
// checks their syntax, not their ranges.
func (f *fields) scan(v string) error {
	switch {
	case len(v) == 29 && v[3] == ',':
		// IMF-fixdate: "Sun" ", 06 Nov 1994 08:49:37 GMT"
		return f.scanComma(v[:3], v[3:], FormIMFFixdate, shortDays[:], ' ', 4)
	case len(v) == 24 && v[3] == ' ':
		return f.scanASCTime(v)
	default:
		// RFC 850: "Sunday" ", 06-Nov-94 08:49:37 GMT"; the day name is 6
		// to 9 letters and the rest 24 bytes.
		comma := len(v) - 24
		if comma < 6 || comma > 9 || v[comma] != ',' {
			return ErrLayout
		}
		return f.scanComma(v[:comma], v[comma:], FormRFC850, longDays[:], '-', 2)
	}
}

// scanComma reads the two forms that put the day name before a comma:
// name, then r = ", DD" sep "Mon" sep year " HH:MM:SS GMT", where sep is ' '
// and the year 4 digits for IMF-fixdate, '-' and 2 digits for RFC 850.
func (f *fields) scanComma(name, r string, form Form, names []string, sep byte, yearLen int) error {
	clock := 10 + yearLen // start of HH:MM:SS
	if r[1] != ' ' || r[4] != sep || r[8] != sep || r[clock-1] != ' ' || r[clock+8] != ' ' {
		return ErrLayout
	}
	f.form = form
	var ok bool
	if f.wday = index(names, name); f.wday < 0 {
		return ErrDayName
	}
	if f.day, ok = digits(r[2:4]); !ok {
		return ErrDigits
	}
	if f.mon = int64(index(months[:], r[5:8])) + 1; f.mon == 0 {
		return ErrMonth
	}
	if f.year, ok = digits(r[9 : 9+yearLen]); !ok {
		return ErrDigits
	}
	if f.hour, f.min, f.sec, ok = hms(r[clock : clock+8]); !ok {
		return ErrDigits
	}
	if r[clock+9:] != "GMT" {
		return ErrZone
	}
	return nil
}

// scanASCTime reads "Sun Nov  6 08:49:37 1994"; the day is SP DIGIT or
// 2DIGIT.
func (f *fields) scanASCTime(v string) error {
	if v[7] != ' ' || v[10] != ' ' || v[19] != ' ' {
		return ErrLayout
	}
	f.form = FormASCTime
	var ok bool
	if f.wday = index(shortDays[:], v[0:3]); f.wday < 0 {
		return ErrDayName
	}
	if f.mon = int64(index(months[:], v[4:7])) + 1; f.mon == 0 {
		return ErrMonth
	}
	dd := v[8:10]
	if dd[0] == ' ' {
		dd = dd[1:]
	}
	if f.day, ok = digits(dd); !ok {
		return ErrDigits
	}
	if f.hour, f.min, f.sec, ok = hms(v[11:19]); !ok {
		return ErrDigits
	}
	if f.year, ok = digits(v[20:24]); !ok {
		return ErrDigits
	}
	return nil
}

// clockInRange reports whether f's time of day is at most 23:59:59 or the
// leap second 23:59:60.
func (f *fields) clockInRange() bool {
	return f.hour <= 23 && f.min <= 59 && (f.sec <= 59 || (f.sec == 60 && f.hour == 23 && f.min == 59))
}

// resolve checks the date of f, whose year is a full year in 0000-9999 and
// whose clock is in range, and returns its UTC Unix seconds (time.Date:
// the proleptic Gregorian calendar, without allocating).
func (f *fields) resolve() (int64, error) {
	if f.day < 1 || f.day > daysIn(f.mon, f.year) {
		return 0, ErrDayRange
	}
	date := time.Date(int(f.year), time.Month(f.mon), int(f.day), 0, 0, 0, 0, time.UTC)
	if int(date.Weekday()) != f.wday {
		return 0, ErrWeekday
	}
	return date.Unix() + f.hour*3600 + f.min*60 + f.sec, nil
}

// index returns the index of the exact (case-sensitive) name s in names, or
// -1.
func index(names []string, s string) int {
	for i, n := range names {
		if s == n {
			return i
		}
	}
	return -1
}

// digits parses a short, non-empty, all-ASCII-digit field.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// hms parses "HH:MM:SS"; the caller checks the ranges.
func hms(s string) (h, m, sec int64, ok bool) {
	if s[2] != ':' || s[5] != ':' {
		return 0, 0, 0, false
	}
	var ok1, ok2, ok3 bool
	h, ok1 = digits(s[0:2])
	m, ok2 = digits(s[3:5])
	sec, ok3 = digits(s[6:8])
	return h, m, sec, ok1 && ok2 && ok3
}

// daysIn returns the number of days of month mon (1-12) of year y in the
// proleptic Gregorian calendar.
func daysIn(mon, y int64) int64 {
	switch mon {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	default:
		return 31
	}
}
