package rrazure

// AzcoreDefaultStatusCodes lets the tests compare rrazure's copy of
// azcore's defaults with what azcore does.
var AzcoreDefaultStatusCodes = azcoreDefaultStatusCodes

// IsMutation and WithoutQuery are the module's own copies of the
// transport's method rule and of its URL redaction, under test.
var (
	IsMutation   = isMutation
	WithoutQuery = withoutQuery
)
