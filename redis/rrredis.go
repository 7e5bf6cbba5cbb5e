// Package rrredis keeps readrecovery's scope cards in Redis, for the
// processes of a fleet on any number of hosts (R104; docs/fleets.md,
// "Stores"):
//
//	rdb := redis.NewClient(&redis.Options{Addr: "cache:6379", ContextTimeoutEnabled: true})
//	store := rrredis.NewScopeStore(rdb, "readrecovery:")
//	t := readrecovery.New(nil, readrecovery.WithSharedRestrictions(readrecovery.AzureScope),
//		readrecovery.WithScopeStore(store))
//
// One exchange is one Lua script (EVALSHA), atomic in Redis: it reads the
// scope's card, merges the caller's card into it by readrecovery's merge
// rule (the later not-before wins with its request ID, the later learnt
// pace with its rate and burst; nothing is ever shortened), writes the
// caller's member record with its lease, drops the members whose lease
// has ended, and returns the card, the live members and Redis's TIME,
// which is the store's clock.
package rrredis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/readrecovery/readrecovery"
)

// NewScopeStore returns a [readrecovery.ScopeStore] kept in Redis through
// client, under keys that begin with prefix ("" is allowed; a prefix of
// its own per fleet keeps fleets apart). A scope's keys are
// prefix+"{"+DIGEST+"}:card" (a hash: the card), ":leases" (a sorted set:
// each member's lease, in Unix milliseconds) and ":members" (a hash: each
// member's record), DIGEST being the first 32 hex digits of the SHA-256 of
// the scope's text, so that no key carries the text and a scope's three
// keys share one Redis Cluster slot. A card is kept until it is deleted; a
// member's record is dropped by the first exchange after its lease ends,
// and an empty scope's member keys vanish with their last member.
//
// Every error wraps [readrecovery.ErrScopeStore]: a refused argument (see
// [readrecovery.ScopeStore]), a Redis that cannot be reached or answers
// an error, a card that fails to decode (left as it is, never
// overwritten). Exchange returns when ctx is done even while Redis has
// not answered; the command itself is bounded by the client's own
// timeouts (ReadTimeout, or ctx with ContextTimeoutEnabled), and may
// still take effect after that return: a merge that can only lengthen.
//
// client's commands are sent as they are: build it without readrecovery
// (go-redis does not use net/http). A nil client panics.
func NewScopeStore(client redis.UniversalClient, prefix string) readrecovery.ScopeStore {
	if client == nil {
		panic("rrredis: NewScopeStore with a nil client")
	}
	return &store{c: client, prefix: prefix}
}

type store struct {
	c      redis.UniversalClient
	prefix string
}

// exchangeScript is one exchange. KEYS: card, leases, members. ARGV: the
// caller's not-before (Unix ms), request ID, rate, burst (as Go formats
// them), learnt (Unix ms), member ID ("" for none), lease (Unix ms),
// member record. It returns {card fields}, {live ID, lease, ...},
// {records of those IDs}, now (Unix ms).
//
// The merge is readrecovery's mergeCard, field for field: a later
// not-before replaces the not-before and its request ID; a later learnt
// replaces rate, burst and learnt; an equal or earlier one, or a zero,
// changes nothing. Times are integers in milliseconds (below 2^53, exact
// as Lua numbers); rate and burst are kept as the strings Go wrote. A
// stored card whose fields do not check out is answered with a CORRUPT
// error reply and left as it is.
var exchangeScript = redis.NewScript(`
local card, leases, members = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function ms(s)
  if type(s) ~= 'string' or #s > 15 or not string.match(s, '^%d+$') then return nil end
  return tonumber(s)
end
local function rate(s)
  if type(s) ~= 'string' or #s > 32 or not string.match(s, '^[0-9.eE+-]+$') then return false end
  local n = tonumber(s)
  return n ~= nil and n == n and n >= 0 and n ~= math.huge
end
local function rid(s)
  return type(s) == 'string' and #s <= 128 and string.match(s, '^[%w%.:_%-]*$') ~= nil
end

local nb, id, r, b, learnt = '0', '', '0', '0', '0'
if redis.call('EXISTS', card) == 1 then
  local f = redis.call('HMGET', card, 'v', 'nb', 'rid', 'rate', 'burst', 'learnt')
  if f[1] ~= '1' then return redis.error_reply('CORRUPT card: version') end
  if not ms(f[2]) or not ms(f[6]) or not rid(f[3]) or not rate(f[4]) or not rate(f[5]) then
    return redis.error_reply('CORRUPT card: a field does not check out')
  end
  if redis.call('HLEN', card) ~= 6 then return redis.error_reply('CORRUPT card: unknown fields') end
  nb, id, r, b, learnt = f[2], f[3], f[4], f[5], f[6]
end

local changed = false
if tonumber(ARGV[1]) > tonumber(nb) then
  nb, id = ARGV[1], ARGV[2]
  changed = true
end
if tonumber(ARGV[5]) > tonumber(learnt) then
  r, b, learnt = ARGV[3], ARGV[4], ARGV[5]
  changed = true
end
if changed then
  redis.call('HSET', card, 'v', '1', 'nb', nb, 'rid', id, 'rate', r, 'burst', b, 'learnt', learnt)
end

if ARGV[6] ~= '' then
  redis.call('ZADD', leases, tonumber(ARGV[7]), ARGV[6])
  redis.call('HSET', members, ARGV[6], ARGV[8])
end
local dead = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
for i = 1, #dead do redis.call('HDEL', members, dead[i]) end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) end
local live = redis.call('ZRANGEBYSCORE', leases, '(' .. string.format('%.0f', now), '+inf', 'WITHSCORES')
local recs = {}
for i = 1, #live, 2 do
  recs[#recs + 1] = redis.call('HGET', members, live[i]) or ''
end
return {{'1', nb, id, r, b, learnt}, live, recs, string.format('%.0f', now)}
`)

// digest is the name of a scope in keys: the first 32 hex digits of the
// SHA-256 of its text (the same digest as the other stores').
func digest(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:16])
}

func (s *store) keys(scope string) []string {
	base := s.prefix + "{" + digest(scope) + "}:"
	return []string{base + "card", base + "leases", base + "members"}
}

// record is a member's record in the members hash (the lease is its
// score in the leases set).
type record struct {
	V      int     `json:"v"`
	Demand float64 `json:"demand"`
	Share  float64 `json:"share"`
}

func (s *store) Exchange(ctx context.Context, scope string, card readrecovery.ScopeCard, member readrecovery.ScopeMember) (readrecovery.ScopeView, error) {
	if ctx == nil {
		return readrecovery.ScopeView{}, fail("exchange", errors.New("nil context"))
	}
	if err := ctx.Err(); err != nil {
		return readrecovery.ScopeView{}, fail("exchange", err)
	}
	args, err := exchangeArgs(scope, card, member)
	if err != nil {
		return readrecovery.ScopeView{}, err
	}
	keys := s.keys(scope)
	type answer struct {
		v   any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := exchangeScript.Run(ctx, s.c, keys, args...).Result()
		done <- answer{v, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		return readrecovery.ScopeView{}, fail("exchange of scope "+digest(scope), ctx.Err())
	}
	if a.err != nil {
		var re redis.Error
		// A CORRUPT error reply is the script's own code for a card
		// that fails its checks (Redis error replies begin with a code,
		// as WRONGTYPE does).
		if errors.As(a.err, &re) && strings.HasPrefix(re.Error(), "CORRUPT ") {
			return readrecovery.ScopeView{}, fail("exchange", &corruptError{Key: keys[0], Reason: strings.TrimPrefix(re.Error(), "CORRUPT ")})
		}
		return readrecovery.ScopeView{}, fail("exchange of scope "+digest(scope), a.err)
	}
	return decodeAnswer(keys[0], a.v)
}

// corruptError is a stored card that fails to decode: its key (a digest,
// no scope text) and what is wrong. The error Exchange returns wraps it
// and [readrecovery.ErrScopeStore].
type corruptError struct {
	Key    string
	Reason string
}

func (e *corruptError) Error() string { return "corrupt card " + e.Key + ": " + e.Reason }

func fail(what string, err error) error {
	return fmt.Errorf("%w: redis: %s: %w", readrecovery.ErrScopeStore, what, err)
}

// exchangeArgs checks an exchange's arguments as every store does and
// returns the script's ARGV.
func exchangeArgs(scope string, c readrecovery.ScopeCard, m readrecovery.ScopeMember) ([]any, error) {
	if scope == "" {
		return nil, fail("exchange", errors.New("empty scope"))
	}
	nb, err := millis(c.NotBefore)
	if err != nil {
		return nil, fail("exchange: card: not-before", err)
	}
	learnt, err := millis(c.Learnt)
	if err != nil {
		return nil, fail("exchange: card: learnt", err)
	}
	if !rateOK(c.Rate) || !rateOK(c.Burst) {
		return nil, fail("exchange: card", errors.New("rate and burst must be finite and not negative"))
	}
	if c.RequestID != "" && !requestID.MatchString(c.RequestID) {
		return nil, fail("exchange: card", errors.New("request ID is not sanitized"))
	}
	var lease int64
	var rec []byte
	if m != (readrecovery.ScopeMember{}) {
		if !memberID.MatchString(m.ID) {
			return nil, fail("exchange: member", errors.New("member ID must be 1 to 64 letters, digits, '-', '_' or '.'"))
		}
		if !rateOK(m.Demand) || !rateOK(m.Share) {
			return nil, fail("exchange: member", errors.New("demand and share must be finite and not negative"))
		}
		if lease, err = millis(m.Lease); err != nil {
			return nil, fail("exchange: member: lease", err)
		}
		rec, _ = json.Marshal(record{V: 1, Demand: m.Demand, Share: m.Share})
	}
	return []any{
		strconv.FormatInt(nb, 10), c.RequestID, formatRate(c.Rate), formatRate(c.Burst),
		strconv.FormatInt(learnt, 10), m.ID, strconv.FormatInt(lease, 10), string(rec),
	}, nil
}

var (
	requestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	memberID  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
)

// maxMillis is the last millisecond of 9999-12-31 (the module's bound on
// representable times).
const maxMillis = 253402300799999

func millis(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	ms := t.UnixMilli()
	if ms <= 0 || ms > maxMillis {
		return 0, errors.New("time outside 1970-01-01 .. 9999-12-31")
	}
	return ms, nil
}

func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func rateOK(f float64) bool { return f >= 0 && !math.IsInf(f, 0) && !math.IsNaN(f) }

func formatRate(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// decodeAnswer checks and decodes the script's answer.
func decodeAnswer(key string, v any) (readrecovery.ScopeView, error) {
	bad := func(why string) (readrecovery.ScopeView, error) {
		return readrecovery.ScopeView{}, fail("exchange", &corruptError{Key: key, Reason: why})
	}
	top, ok := v.([]any)
	if !ok || len(top) != 4 {
		return bad("answer is not four parts")
	}
	f, ok1 := stringsN(top[0], 6)
	live, ok2 := top[1].([]any)
	recs, ok3 := top[2].([]any)
	nowS, ok4 := top[3].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(live) != 2*len(recs) {
		return bad("answer's parts are not strings")
	}
	nb, err1 := strconv.ParseInt(f[1], 10, 64)
	rate, err2 := strconv.ParseFloat(f[3], 64)
	burst, err3 := strconv.ParseFloat(f[4], 64)
	learnt, err4 := strconv.ParseInt(f[5], 10, 64)
	now, err5 := strconv.ParseInt(nowS, 10, 64)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || nb < 0 || nb > maxMillis || learnt < 0 || learnt > maxMillis || !rateOK(rate) || !rateOK(burst) {
		return bad("a field does not check out")
	}
	view := readrecovery.ScopeView{
		Card: readrecovery.ScopeCard{NotBefore: fromMillis(nb), RequestID: f[2], Rate: rate, Burst: burst, Learnt: fromMillis(learnt)},
		Now:  time.UnixMilli(now).UTC(),
	}
	for i := range recs {
		id, _ := live[2*i].(string)
		leaseS, _ := live[2*i+1].(string)
		recS, _ := recs[i].(string)
		lease, err := strconv.ParseInt(leaseS, 10, 64)
		var r record
		if err != nil || decodeRecord(recS, &r) != nil || r.V != 1 || !rateOK(r.Demand) || !rateOK(r.Share) {
			continue // a record that does not check out is skipped, as the other stores skip one
		}
		view.Members = append(view.Members, readrecovery.ScopeMember{ID: id, Demand: r.Demand, Share: r.Share, Lease: fromMillis(lease)})
	}
	slices.SortFunc(view.Members, func(a, b readrecovery.ScopeMember) int { return strings.Compare(a.ID, b.ID) })
	return view, nil
}

func stringsN(v any, n int) ([]string, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != n {
		return nil, false
	}
	out := make([]string, n)
	for i, x := range a {
		if out[i], ok = x.(string); !ok {
			return nil, false
		}
	}
	return out, true
}

// decodeRecord decodes a member record strictly (one object, known
// fields, at most 512 bytes).
func decodeRecord(s string, r *record) error {
	if len(s) > 512 {
		return errors.New("record too long")
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(r); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the record")
	}
	return nil
}
