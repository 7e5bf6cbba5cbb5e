package readrecovery

import "context"

// BudgetFrom returns the Budget that [WithBudget] put in ctx, or nil when
// ctx carries none (a nil ctx included). Adapters use it to tell, from a
// response's request, whether readrecovery decided its 429.
func BudgetFrom(ctx context.Context) *Budget {
	if ctx == nil {
		return nil
	}
	if s := stateFrom(ctx); s != nil {
		return s.budget
	}
	return nil
}
