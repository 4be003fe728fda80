package charges

// The request limits, for the test that holds them equal to api/openapi.yaml.
const (
	MaxDescription        = maxDescription
	MaxMetadataKeys       = maxMetadataKeys
	MaxMetadataKeyLength  = maxMetadataKeyLength
	MaxMetadataValue      = maxMetadataValue
	MaxPaymentMethodChars = maxPaymentMethodChars
	CurrencyPattern       = currencyPattern
	PaymentMethodPattern  = paymentMethodPattern
)

// RandomIDs makes s give new charges and refunds random ids, as a claim
// past phases.ObjectIDAttempts incarnations does.
func RandomIDs(s *Service) { s.ids.random.Store(true) }
