package rrazure

// AzcoreDefaultStatusCodes lets the tests compare rrazure's copy of
// azcore's defaults with what azcore does.
var AzcoreDefaultStatusCodes = azcoreDefaultStatusCodes
