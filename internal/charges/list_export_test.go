package charges

// The list statements, for the test that reads their plans.
const (
	ListChargesSQL    = listChargesSQL
	ListRefundsSQL    = listRefundsSQL
	ListAllRefundsSQL = listAllRefundsSQL
)
