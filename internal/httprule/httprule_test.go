package httprule

import (
	"net/http"
	"testing"
)

func TestIsMutation(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{"", false}, // net/http's GET
		{http.MethodGet, false},
		{http.MethodHead, false},
		{http.MethodOptions, false},
		{http.MethodTrace, false},
		{http.MethodPut, true},
		{http.MethodPost, true},
		{http.MethodPatch, true},
		{http.MethodDelete, true},
		{"MERGE", true},            // Azure Table storage's Merge Entity
		{http.MethodConnect, true}, // not safe in RFC 9110
		{"PROPPATCH", true},        // an unknown extension method writes
		{"get", true},              // methods are case-sensitive
	} {
		if got := IsMutation(tc.method); got != tc.want {
			t.Errorf("IsMutation(%q) = %v, want %v", tc.method, got, tc.want)
		}
	}
}

func TestIsSuccess(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   bool
	}{
		{0, false}, {100, false}, {199, false},
		{200, true}, {201, true}, {204, true}, {206, true}, {299, true},
		{300, false}, {304, false}, {404, false}, {429, false}, {500, false},
	} {
		if got := IsSuccess(tc.status); got != tc.want {
			t.Errorf("IsSuccess(%d) = %v, want %v", tc.status, got, tc.want)
		}
	}
}

func TestIsThrottled(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   bool
	}{
		{429, true},
		{0, false}, {200, false}, {408, false}, {428, false}, {430, false}, {503, false},
	} {
		if got := IsThrottled(tc.status); got != tc.want {
			t.Errorf("IsThrottled(%d) = %v, want %v", tc.status, got, tc.want)
		}
	}
}
