-- +goose Up

-- Pitfall: PostgreSQL 15 evaluates every CHECK constraint of a table on
-- every INSERT and on every UPDATE, whatever columns the UPDATE sets. A new
-- charge writes idempotency_keys, charges and charge_attempts twice each
-- (inserted, then updated by the authorization), so each of their
-- column-only CHECKs ran twice per charge, the string ones (IN lists, a
-- regular expression) costing the most. A domain's CHECK runs only where a
-- value is converted to the domain: an INSERT's values and an UPDATE's SET
-- (and a parameter sent as the domain). The UPDATE that records an
-- authorization sets status and a few columns, no longer checking the
-- currency's regular expression, the amount and the settlement again.
--
-- Kept: every value refused before is refused now, with the same SQLSTATE
-- (23514, check_violation; the message names the domain instead of the
-- table's constraint), since each column-only CHECK moves unchanged onto
-- the domain of its column. The CHECKs over several columns
-- (idempotency_keys_check, charges_amounts_check, charges_settled_check)
-- stay on their tables. charges.id and idempotency_keys.key keep their
-- CHECKs: both are in keys other tables reference. idempotency_keys.state
-- keeps its CHECK too: as a domain, a parameter both assigned to it and
-- compared with text (SET state = $3 … CASE WHEN $3 = 'done') is deduced
-- as two types and refused (42P08, found by
-- TestRequestStateSQLAgreesWithGo), and the partial indexes that name it
-- would be rebuilt. A domain must not be named after a function either: a
-- domain sha256 turned sha256('x') into a cast (TestNewChargeLocksNoTenantRow).
--
-- How, without rewriting the tables: a column whose type becomes a domain
-- with constraints is rewritten under ACCESS EXCLUSIVE (the table's every
-- partition for idempotency_keys); to a domain without one it is not (the
-- types are binary-coercible). So each domain is created bare, the column
-- moved onto it, and only then is the CHECK added NOT VALID and validated
-- (a scan, not a rewrite) before the table's own CHECK is dropped. None of
-- these columns is in an index. Partitions made later (the ensure
-- functions' CREATE TABLE … LIKE idempotency_keys) take the domain with the
-- column.

CREATE DOMAIN key_fingerprint AS bytea;
ALTER TABLE idempotency_keys ALTER COLUMN fingerprint TYPE key_fingerprint;
ALTER DOMAIN key_fingerprint ADD CONSTRAINT key_fingerprint_check CHECK (length(VALUE) = 32) NOT VALID;
ALTER DOMAIN key_fingerprint VALIDATE CONSTRAINT key_fingerprint_check;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_fingerprint_check;

CREATE DOMAIN positive_amount AS bigint;
CREATE DOMAIN currency_code AS text;
CREATE DOMAIN charge_status AS text;
CREATE DOMAIN charge_settlement AS text;
ALTER TABLE charges
    ALTER COLUMN amount TYPE positive_amount,
    ALTER COLUMN currency TYPE currency_code,
    ALTER COLUMN status TYPE charge_status,
    ALTER COLUMN settlement TYPE charge_settlement;
ALTER DOMAIN positive_amount ADD CONSTRAINT positive_amount_check CHECK (VALUE > 0) NOT VALID;
ALTER DOMAIN positive_amount VALIDATE CONSTRAINT positive_amount_check;
ALTER DOMAIN currency_code ADD CONSTRAINT currency_code_check CHECK (VALUE ~ '^[a-z]{3}$') NOT VALID;
ALTER DOMAIN currency_code VALIDATE CONSTRAINT currency_code_check;
ALTER DOMAIN charge_status ADD CONSTRAINT charge_status_check
    CHECK (VALUE IN ('pending', 'authorized', 'declined', 'failed', 'captured', 'voided')) NOT VALID;
ALTER DOMAIN charge_status VALIDATE CONSTRAINT charge_status_check;
ALTER DOMAIN charge_settlement ADD CONSTRAINT charge_settlement_check CHECK (VALUE IN ('capture', 'void')) NOT VALID;
ALTER DOMAIN charge_settlement VALIDATE CONSTRAINT charge_settlement_check;
ALTER TABLE charges
    DROP CONSTRAINT charges_amount_check,
    DROP CONSTRAINT charges_currency_check,
    DROP CONSTRAINT charges_status_check,
    DROP CONSTRAINT charges_settlement_check;

CREATE DOMAIN attempt_number AS integer;
CREATE DOMAIN attempt_outcome AS text;
ALTER TABLE charge_attempts
    ALTER COLUMN n TYPE attempt_number,
    ALTER COLUMN outcome TYPE attempt_outcome;
ALTER DOMAIN attempt_number ADD CONSTRAINT attempt_number_check CHECK (VALUE >= 1) NOT VALID;
ALTER DOMAIN attempt_number VALIDATE CONSTRAINT attempt_number_check;
ALTER DOMAIN attempt_outcome ADD CONSTRAINT attempt_outcome_check CHECK (VALUE IN ('authorized', 'declined', 'refused')) NOT VALID;
ALTER DOMAIN attempt_outcome VALIDATE CONSTRAINT attempt_outcome_check;
ALTER TABLE charge_attempts
    DROP CONSTRAINT charge_attempts_n_check,
    DROP CONSTRAINT charge_attempts_outcome_check;

-- +goose Down
ALTER TABLE charge_attempts
    ALTER COLUMN n TYPE integer,
    ALTER COLUMN outcome TYPE text,
    ADD CONSTRAINT charge_attempts_n_check CHECK (n >= 1),
    ADD CONSTRAINT charge_attempts_outcome_check CHECK (outcome IN ('authorized', 'declined', 'refused'));
DROP DOMAIN attempt_number;
DROP DOMAIN attempt_outcome;
ALTER TABLE charges
    ALTER COLUMN amount TYPE bigint,
    ALTER COLUMN currency TYPE text,
    ALTER COLUMN status TYPE text,
    ALTER COLUMN settlement TYPE text,
    ADD CONSTRAINT charges_amount_check CHECK (amount > 0),
    ADD CONSTRAINT charges_currency_check CHECK (currency ~ '^[a-z]{3}$'),
    ADD CONSTRAINT charges_status_check CHECK (status IN ('pending', 'authorized', 'declined', 'failed', 'captured', 'voided')),
    ADD CONSTRAINT charges_settlement_check CHECK (settlement IN ('capture', 'void'));
DROP DOMAIN positive_amount;
DROP DOMAIN currency_code;
DROP DOMAIN charge_status;
DROP DOMAIN charge_settlement;
ALTER TABLE idempotency_keys
    ALTER COLUMN fingerprint TYPE bytea,
    ADD CONSTRAINT idempotency_keys_fingerprint_check CHECK (length(fingerprint) = 32);
DROP DOMAIN key_fingerprint;
