package readrecovery

// MergeCard is mergeCard for the external tests, which run the merge
// table of scopestoretest (a package that imports this one).
var MergeCard = mergeCard
