// Package rrazuretest helps test code wired with rrazure: it counts the
// tries azcore's retry policy makes, so that a test can tell whether azcore
// retried a request (the ownership rule of docs/policy.md,
// "one-owner-per-429").
//
// It is the one copy of this helper for the azure module's own tests and
// for the integration module, which cannot reach an internal package of
// this module.
package rrazuretest

import (
	"net/http"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// CountTries returns a policy that adds one to n each time it runs and
// passes the request on. Put it in policy.ClientOptions.PerRetryPolicies:
// azcore runs a per-retry policy once per try, so n counts the tries.
func CountTries(n *atomic.Int32) policy.Policy {
	return policyFunc(func(req *policy.Request) (*http.Response, error) {
		n.Add(1)
		return req.Next()
	})
}

type policyFunc func(*policy.Request) (*http.Response, error)

func (f policyFunc) Do(req *policy.Request) (*http.Response, error) { return f(req) }
