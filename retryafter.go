package readrecovery

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// RetryAfterKind says what a response's Retry-After field was, after the
// strict parse of [ParseRetryAfter].
type RetryAfterKind string

// The six kinds of Retry-After observation.
const (
	// RetryAfterSeconds is a valid delay-seconds value of at most 30 s.
	RetryAfterSeconds RetryAfterKind = "seconds"
	// RetryAfterDate is a valid HTTP-date (IMF-fixdate, RFC 850 or asctime)
	// at most 30 s after the receipt time; a past date is a zero delay.
	RetryAfterDate RetryAfterKind = "date"
	// RetryAfterMissing means the response had no Retry-After field.
	RetryAfterMissing RetryAfterKind = "missing"
	// RetryAfterInvalid means the field was malformed or duplicated.
	RetryAfterInvalid RetryAfterKind = "invalid"
	// RetryAfterOverlong is a valid delay above the 30 s ceiling.
	RetryAfterOverlong RetryAfterKind = "overlong"
	// RetryAfterOversized is a field longer than [MaxRetryAfterBytes].
	RetryAfterOversized RetryAfterKind = "oversized"
)

// MaxRetryAfterBytes bounds the length of one Retry-After field value. A
// longer value is [RetryAfterOversized]: it fails closed, with no wait.
const MaxRetryAfterBytes = 128

// MaxServerWait is the longest server-directed wait the transport takes. A
// valid delay above it is [RetryAfterOverlong] and stops the sequence; it is
// never shortened.
const MaxServerWait = 30 * time.Second

// fallbackDelaySeconds is the diagnosed delay used for a missing, malformed
// or duplicated field. It lives in the timing only, never in the typed value.
const fallbackDelaySeconds = 1

// RetryAfter is the canonical, typed Retry-After observation. Value is the
// delay in seconds for [RetryAfterSeconds] and [RetryAfterDate] and 0 for every
// other kind (0 is the overlong sentinel, not a zero wait).
type RetryAfter struct {
	Kind  RetryAfterKind `json:"kind"`
	Value int64          `json:"value"`
}

// RetryAfterTiming is the portable, sanitized timing of a Retry-After
// observation, in UTC Unix seconds: NotBeforeUTC = ReceivedAtUTC +
// ServerDelaySeconds. It exists only when the receipt time is known and the
// delay is representable.
type RetryAfterTiming struct {
	ReceivedAtUTC      int64 `json:"received_at_utc"`
	NotBeforeUTC       int64 `json:"not_before_utc"`
	ServerDelaySeconds int64 `json:"server_delay_seconds"`
}

// ParseRetryAfter reads the Retry-After field of a response received at
// receivedAt and returns its typed value, its UTC timing and a short
// diagnostic. The diagnostic is "" when the field was clean (kind
// [RetryAfterSeconds] or [RetryAfterDate]); otherwise it describes the problem
// and never repeats the field's value, which the server controls.
//
// Lookup (R17) compares every key of h case-insensitively (ASCII only), so
// keys set by hand such as h["retry-after"] are found too. Two or more values
// in total, or two matching keys (they necessarily differ in case), are a
// duplicate: [RetryAfterInvalid]. A matching key that holds no value at all
// counts as an absent field. Any single value longer than
// [MaxRetryAfterBytes] (raw length, before trimming) is [RetryAfterOversized],
// with no timing; it wins over a duplicate, so the result fails closed.
//
// The value is trimmed of leading and trailing SP and HTAB (RFC 9110 OWS) and
// nothing else. It is then either:
//
//   - delay-seconds (R18): one or more ASCII digits, leading zeros allowed, no
//     sign, decimal point, inner space or non-ASCII digit. Digits that
//     overflow int64 are an unrepresentable delay.
//   - HTTP-date (R19): exactly one of the three RFC 9110 section 5.6.7 forms,
//     "Sun, 06 Nov 1994 08:49:37 GMT" (IMF-fixdate), "Sunday, 06-Nov-94
//     08:49:37 GMT" (RFC 850) or "Sun Nov  6 08:49:37 1994" (asctime; the day
//     is SP DIGIT or 2DIGIT). Day and month names are case-sensitive, as the
//     RFC's %s"..." grammar says; the zone is the literal "GMT"; the weekday
//     must be the one of the date; the date must exist in the proleptic
//     Gregorian calendar and the time be at most 23:59:59, except the leap
//     second 23:59:60, which is read as the following 00:00:00 (UTC Unix time
//     has no leap seconds; reading it one second later never shortens a
//     wait). An RFC 850 two-digit year takes the century that puts the
//     timestamp as late as possible but not more than 50 years after the
//     receipt time (RFC 9110: a timestamp that appears more than 50 years in
//     the future is the most recent past year with those digits); the 50
//     years are calendar years, so the receipt's own month, day and time 50
//     years on is still the future century. The delay is the date minus
//     receivedAt, both in UTC Unix seconds (receivedAt.Unix(), so a fraction
//     of a second is dropped); a date in the past is a zero delay.
//
// A delay of at most 30 s ([MaxServerWait]) is [RetryAfterSeconds] or
// [RetryAfterDate] with Value = delay. A longer one is [RetryAfterOverlong]
// with Value 0 (R22): its timing keeps the real delay when ReceivedAtUTC +
// delay fits in int64, and is nil otherwise (an unrepresentable delay, also
// for digits beyond int64, for a date further from the receipt time than
// int64 seconds, and for an RFC 850 year that resolves outside 0000-9999).
// A delay of at most 30 s whose NotBeforeUTC would overflow is overlong and
// unrepresentable as well.
//
// A missing field is [RetryAfterMissing] and a malformed or duplicated one is
// [RetryAfterInvalid], both with Value 0 (R20): the 1-second fallback lives
// in the timing only (ServerDelaySeconds 1, NotBeforeUTC = ReceivedAtUTC+1),
// or there is no timing when ReceivedAtUTC+1 overflows.
//
// Timing exists only when the receipt time is known (R23): a zero receivedAt
// gives a nil timing for every kind. Delay-seconds keep their kind and value
// then, but an HTTP-date cannot be resolved without a receipt time, so a
// well-formed date with a zero receivedAt is [RetryAfterInvalid] with Value
// 0, nil timing and the diagnostic "retry-after: http-date without receipt
// time; unresolved". Typed metadata without timing (missing, invalid,
// overlong) is unresolved, never a zero wait.
//
// ParseRetryAfter never panics and does not allocate on the clean paths
// except for the returned timing.
func ParseRetryAfter(h http.Header, receivedAt time.Time) (RetryAfter, *RetryAfterTiming, string) {
	timed := !receivedAt.IsZero()
	var recv int64
	if timed {
		recv = receivedAt.Unix()
	}

	var (
		value    string
		keys     int
		values   int
		oversize bool
	)
	for k, vs := range h {
		if !isRetryAfterKey(k) {
			continue
		}
		keys++
		values += len(vs)
		for _, v := range vs {
			if len(v) > MaxRetryAfterBytes {
				oversize = true
			}
		}
		if len(vs) > 0 {
			value = vs[0]
		}
	}

	switch {
	case oversize:
		// R21: fail closed, whatever else the field holds.
		return RetryAfter{Kind: RetryAfterOversized}, nil,
			"retry-after: value longer than " + strconv.Itoa(MaxRetryAfterBytes) + " bytes; fail closed, no wait"
	case keys > 1:
		return raFallback(RetryAfterInvalid, recv, timed,
			"retry-after: "+strconv.Itoa(keys)+" keys differing in case")
	case values > 1:
		return raFallback(RetryAfterInvalid, recv, timed,
			"retry-after: "+strconv.Itoa(values)+" values")
	case values == 0:
		return raFallbackConst(RetryAfterMissing, recv, timed,
			raDiagMissing+raDiagFallback, raDiagMissing+raDiagNoReceipt)
	}

	v := raTrimOWS(value)
	if v == "" {
		return raFallbackConst(RetryAfterInvalid, recv, timed,
			raDiagEmpty+raDiagFallback, raDiagEmpty+raDiagNoReceipt)
	}

	c := v[0]
	switch {
	case '0' <= c && c <= '9':
		return parseDelaySeconds(v, recv, timed)
	case ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z'):
		return parseDateValue(v, recv, timed)
	default:
		return raFallbackConst(RetryAfterInvalid, recv, timed,
			raDiagNeither+raDiagFallback, raDiagNeither+raDiagNoReceipt)
	}
}

// Diagnostic fragments. They are constants so that the common outcomes need
// no allocation; none of them carries the field's value.
const (
	raDiagFallback   = "; 1 s fallback"
	raDiagNoReceipt  = "; unresolved, no receipt time"
	raDiagMissing    = "retry-after: missing"
	raDiagEmpty      = "retry-after: empty value"
	raDiagNeither    = "retry-after: neither delay-seconds nor http-date"
	raDiagNotDigits  = "retry-after: delay-seconds is not 1*DIGIT"
	raDiagNoTiming   = "retry-after: http-date without receipt time; unresolved"
	raDiagUnrepr     = "retry-after: delay not representable in unix seconds; unresolved"
	raDiagYearUnres  = "retry-after: rfc850 year not resolvable against receipt time; unresolved"
	raDiagOverlongPf = "retry-after: delay "
	raDiagOverlongSf = " s above 30 s ceiling; sequence stops"
)

// raMaxWaitSeconds is [MaxServerWait] in whole seconds.
const raMaxWaitSeconds = int64(MaxServerWait / time.Second)

// isRetryAfterKey reports whether k is "retry-after" in any ASCII case,
// without allocating.
func isRetryAfterKey(k string) bool {
	const name = "retry-after"
	if len(k) != len(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c, n := k[i], name[i]
		if n == '-' {
			if c != '-' {
				return false
			}
			continue
		}
		// Only letters are folded: bit 0x20 is the ASCII case bit, and n is a
		// lower-case letter, so c|0x20 == n holds for exactly n and upper(n).
		if c|0x20 != n {
			return false
		}
	}
	return true
}

// raTrimOWS removes leading and trailing SP and HTAB (RFC 9110 OWS).
func raTrimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// raFallback returns the diagnosed 1-second fallback of a missing or invalid
// field; reason says what was wrong.
func raFallback(kind RetryAfterKind, recv int64, timed bool, reason string) (RetryAfter, *RetryAfterTiming, string) {
	if !timed {
		return RetryAfter{Kind: kind}, nil, reason + raDiagNoReceipt
	}
	return raFallbackConst(kind, recv, timed, reason+raDiagFallback, "")
}

// raFallbackConst is raFallback with the two complete diagnostics precomputed.
func raFallbackConst(kind RetryAfterKind, recv int64, timed bool, withTiming, withoutTiming string) (RetryAfter, *RetryAfterTiming, string) {
	if !timed {
		return RetryAfter{Kind: kind}, nil, withoutTiming
	}
	t := newRetryAfterTiming(recv, fallbackDelaySeconds)
	if t == nil {
		return RetryAfter{Kind: kind}, nil, withTiming + "; receipt time too late to represent"
	}
	return RetryAfter{Kind: kind}, t, withTiming
}

// newRetryAfterTiming returns the timing of a delay of d ≥ 0 seconds after recv, or nil
// when recv+d overflows int64.
func newRetryAfterTiming(recv, d int64) *RetryAfterTiming {
	if d < 0 || recv > math.MaxInt64-d {
		return nil
	}
	return &RetryAfterTiming{ReceivedAtUTC: recv, NotBeforeUTC: recv + d, ServerDelaySeconds: d}
}

// raOverlong returns the result for a valid delay d > 30 s.
func raOverlong(recv int64, timed bool, d int64) (RetryAfter, *RetryAfterTiming, string) {
	diag := raDiagOverlongPf + strconv.FormatInt(d, 10) + raDiagOverlongSf
	if !timed {
		return RetryAfter{Kind: RetryAfterOverlong}, nil, diag
	}
	t := newRetryAfterTiming(recv, d)
	if t == nil {
		return RetryAfter{Kind: RetryAfterOverlong}, nil, raDiagUnrepr
	}
	return RetryAfter{Kind: RetryAfterOverlong}, t, diag
}

// raResolved returns the result for a valid delay d ≥ 0 of the given kind.
func raResolved(kind RetryAfterKind, recv int64, timed bool, d int64) (RetryAfter, *RetryAfterTiming, string) {
	if d > raMaxWaitSeconds {
		return raOverlong(recv, timed, d)
	}
	if !timed {
		return RetryAfter{Kind: kind, Value: d}, nil, ""
	}
	t := newRetryAfterTiming(recv, d)
	if t == nil {
		return RetryAfter{Kind: RetryAfterOverlong}, nil, raDiagUnrepr
	}
	return RetryAfter{Kind: kind, Value: d}, t, ""
}

// parseDelaySeconds handles a trimmed value that starts with an ASCII digit.
func parseDelaySeconds(v string, recv int64, timed bool) (RetryAfter, *RetryAfterTiming, string) {
	var n int64
	overflow := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return raFallbackConst(RetryAfterInvalid, recv, timed,
				raDiagNotDigits+raDiagFallback, raDiagNotDigits+raDiagNoReceipt)
		}
		if overflow {
			continue // keep checking that the rest is digits
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			overflow = true
			continue
		}
		n = n*10 + d
	}
	if overflow {
		return RetryAfter{Kind: RetryAfterOverlong}, nil, raDiagUnrepr
	}
	return raResolved(RetryAfterSeconds, recv, timed, n)
}

// parseDateValue handles a trimmed value that starts with an ASCII letter.
func parseDateValue(v string, recv int64, timed bool) (RetryAfter, *RetryAfterTiming, string) {
	date, reason := parseHTTPDate(v, recv, timed)
	switch {
	case reason == raDateYearUnresolvable:
		return RetryAfter{Kind: RetryAfterOverlong}, nil, raDiagYearUnres
	case reason != "":
		return raFallback(RetryAfterInvalid, recv, timed, "retry-after: "+reason)
	case !timed:
		return RetryAfter{Kind: RetryAfterInvalid}, nil, raDiagNoTiming
	}
	// date is within years 0000-9999, recv is any int64: the difference can
	// overflow only when recv is far in the past.
	if recv < 0 && date > math.MaxInt64+recv {
		return RetryAfter{Kind: RetryAfterOverlong}, nil, raDiagUnrepr
	}
	d := date - recv
	if d < 0 {
		d = 0 // R19: a past date means no wait
	}
	return raResolved(RetryAfterDate, recv, timed, d)
}

// Reasons parseHTTPDate gives for a value it refuses. They describe the
// problem only.
const (
	raDateLayout           = "http-date layout not imf-fixdate, rfc850 or asctime"
	raDateDayName          = "http-date day name unknown"
	raDateMonth            = "http-date month name unknown"
	raDateDigits           = "http-date number field not digits"
	raDateRange            = "http-date day of month out of range"
	raDateClock            = "http-date time of day out of range"
	raDateZone             = "http-date zone not GMT"
	raDateWeekday          = "http-date weekday does not match the date"
	raDateYearUnresolvable = "http-date rfc850 year unresolvable"
)

var (
	raShortDays = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	raLongDays  = [7]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	raMonths    = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// parseHTTPDate parses one of the three HTTP-date forms and returns it in
// UTC Unix seconds, or a non-empty reason. recv is the receipt time, used
// only for the RFC 850 two-digit year; when timed is false the RFC 850 year
// (and so its weekday and 29 February) cannot be checked, and any
// well-formed RFC 850 date is accepted with a meaningless result.
func parseHTTPDate(v string, recv int64, timed bool) (int64, string) {
	var (
		wday              = -1
		year, mon, day    int64
		hour, minute, sec int64
		ok                bool
		short             bool // RFC 850: two-digit year
	)
	switch {
	case len(v) == 29 && v[3] == ',':
		// IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
		if v[4] != ' ' || v[7] != ' ' || v[11] != ' ' || v[16] != ' ' || v[25] != ' ' {
			return 0, raDateLayout
		}
		if wday = raIndex(raShortDays[:], v[0:3]); wday < 0 {
			return 0, raDateDayName
		}
		if day, ok = raDigits(v[5:7]); !ok {
			return 0, raDateDigits
		}
		if mon = int64(raIndex(raMonths[:], v[8:11])) + 1; mon == 0 {
			return 0, raDateMonth
		}
		if year, ok = raDigits(v[12:16]); !ok {
			return 0, raDateDigits
		}
		if hour, minute, sec, ok = raClock(v[17:25]); !ok {
			return 0, raDateDigits
		}
		if v[26:29] != "GMT" {
			return 0, raDateZone
		}
	case len(v) == 24 && v[3] == ' ':
		// asctime: "Sun Nov  6 08:49:37 1994"
		if v[7] != ' ' || v[10] != ' ' || v[19] != ' ' {
			return 0, raDateLayout
		}
		if wday = raIndex(raShortDays[:], v[0:3]); wday < 0 {
			return 0, raDateDayName
		}
		if mon = int64(raIndex(raMonths[:], v[4:7])) + 1; mon == 0 {
			return 0, raDateMonth
		}
		dd := v[8:10]
		if dd[0] == ' ' {
			dd = dd[1:] // SP DIGIT
		}
		if day, ok = raDigits(dd); !ok {
			return 0, raDateDigits
		}
		if hour, minute, sec, ok = raClock(v[11:19]); !ok {
			return 0, raDateDigits
		}
		if year, ok = raDigits(v[20:24]); !ok {
			return 0, raDateDigits
		}
	default:
		// RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"; the day name is 6 to 9
		// letters and the rest 24 bytes.
		comma := len(v) - 24
		if comma < 6 || comma > 9 || v[comma] != ',' {
			return 0, raDateLayout
		}
		r := v[comma:]
		if r[1] != ' ' || r[4] != '-' || r[8] != '-' || r[11] != ' ' || r[20] != ' ' {
			return 0, raDateLayout
		}
		wday = -1
		for i := range raLongDays {
			if v[:comma] == raLongDays[i] {
				wday = i
				break
			}
		}
		if wday < 0 {
			return 0, raDateDayName
		}
		if day, ok = raDigits(r[2:4]); !ok {
			return 0, raDateDigits
		}
		if mon = int64(raIndex(raMonths[:], r[5:8])) + 1; mon == 0 {
			return 0, raDateMonth
		}
		if year, ok = raDigits(r[9:11]); !ok {
			return 0, raDateDigits
		}
		if hour, minute, sec, ok = raClock(r[12:20]); !ok {
			return 0, raDateDigits
		}
		if r[21:24] != "GMT" {
			return 0, raDateZone
		}
		short = true
	}

	if hour > 23 || minute > 59 || sec > 60 || (sec == 60 && (hour != 23 || minute != 59)) {
		return 0, raDateClock
	}
	if short {
		if !timed {
			// Without a receipt time the century is unknown: check what can
			// be checked (29 February passes) and stop.
			if day < 1 || day > raDaysIn(mon, 2000) {
				return 0, raDateRange
			}
			return 0, ""
		}
		year = rfc850Year(year, mon, day, hour, minute, sec, recv)
		if year < 0 || year > 9999 {
			return 0, raDateYearUnresolvable
		}
	}
	if day < 1 || day > raDaysIn(mon, year) {
		return 0, raDateRange
	}
	days := raDaysFromCivil(year, mon, day)
	if int(raFloorMod(days+4, 7)) != wday { // 1970-01-01 was a Thursday (4)
		return 0, raDateWeekday
	}
	return days*86400 + hour*3600 + minute*60 + sec, ""
}

// rfc850Year resolves a two-digit year against the receipt time recv (UTC
// Unix seconds) as RFC 9110 section 5.6.7 says: the timestamp is taken in the
// century that puts it at most 50 years after the receipt time and as late
// as possible; "50 years" is counted in calendar years, so a timestamp on the
// receipt's month, day and time 50 years later still counts as the future.
func rfc850Year(yy, mon, day, hour, minute, sec, recv int64) int64 {
	rdays := raFloorDiv(recv, 86400)
	rsecs := recv - rdays*86400
	ry, rm, rd := raCivilFromDays(rdays)
	y := ry - raFloorMod(ry, 100) + yy
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
		rs := (rm*32+rd)*86400 + rsecs
		if ts > rs {
			y -= 100
		}
	}
	return y
}

// raIndex returns the index of the exact (case-sensitive) name s in names, or
// -1.
func raIndex(names []string, s string) int {
	for i, n := range names {
		if s == n {
			return i
		}
	}
	return -1
}

// raDigits parses a short all-ASCII-digit field.
func raDigits(s string) (int64, bool) {
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

// raClock parses "HH:MM:SS" (ranges are checked by the caller).
func raClock(s string) (h, m, sec int64, ok bool) {
	if len(s) != 8 || s[2] != ':' || s[5] != ':' {
		return 0, 0, 0, false
	}
	var ok1, ok2, ok3 bool
	h, ok1 = raDigits(s[0:2])
	m, ok2 = raDigits(s[3:5])
	sec, ok3 = raDigits(s[6:8])
	return h, m, sec, ok1 && ok2 && ok3
}

// raDaysIn returns the number of days of month mon (1-12) of year y in the
// proleptic Gregorian calendar.
func raDaysIn(mon, y int64) int64 {
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

// raDaysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (H. Hinnant's algorithm). Used for years 0000-9999 only.
func raDaysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := raFloorDiv(y, 400)
	yoe := y - era*400                     // [0, 399]
	doy := (153*((m+9)%12)+2)/5 + d - 1    // [0, 365], from 1 March
	doe := yoe*365 + yoe/4 - yoe/100 + doy // [0, 146096]
	return era*146097 + doe - 719468
}

// raCivilFromDays is the inverse of raDaysFromCivil; it is valid for every day
// count that Unix seconds in int64 can produce.
func raCivilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := raFloorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

func raFloorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func raFloorMod(a, b int64) int64 { return a - raFloorDiv(a, b)*b }
