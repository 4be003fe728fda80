-- +goose Up

-- The per-host cap counts a host in its canonical form (docs/api.md,
-- "Delivery"; pitfall W6 "One host under many spellings"). webhook_endpoints.host was the URL's host in lower case:
-- http://LocalHost./, http://0x7f000001/, http://2130706433/ and
-- http://127.0.0.1/ were four hosts, each with its own PerHost slots, and
-- a tenant that spelled one machine four ways had four times the cap on
-- it.
--
-- phasepay_canonical_host is the host of an endpoint's URL as the cap
-- counts it:
--
--   - an IPv6 literal (between brackets) in its standard notation
--     (PostgreSQL's inet output: lower case, zeros compressed); an
--     IPv4-mapped one (::ffff:a.b.c.d) is the IPv4 address it maps;
--   - a name in lower case without its trailing dot; a localhost name
--     (localhost, *.localhost) is 127.0.0.1, as RFC 6761 has every
--     resolver answer for it;
--   - a name whose dot-separated parts are all numbers, each decimal, octal
--     (a leading 0) or hexadecimal (0x), is the IPv4 address they spell as
--     inet_aton and the WHATWG URL parser read them (one to four parts,
--     the last filling the bytes the others leave): 0x7f000001,
--     2130706433, 0177.0.0.1 and 127.1 are 127.0.0.1. One that spells no
--     address (a part too large) stays a name.
--
-- IMMUTABLE: it depends on its argument alone, so that a generated column
-- can be made of it.
-- +goose StatementBegin
CREATE FUNCTION phasepay_canonical_host(url text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    host   text;
    a      inet;
    parts  text[];
    part   text;
    digits text;
    base   integer;
    value  numeric;
    addr   numeric := 0;
    n      integer;
BEGIN
    host := substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://\[([^]/]*)\]');
    IF host IS NOT NULL THEN
        BEGIN
            a := host::inet;
        EXCEPTION WHEN invalid_text_representation THEN
            RETURN lower(host);
        END;
        IF a << '::ffff:0:0/96'::inet THEN
            a := '0.0.0.0'::inet + (a - '::ffff:0.0.0.0'::inet);
        END IF;
        RETURN host(a);
    END IF;
    host := rtrim(lower(coalesce(substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#:]*)'), '')), '.');
    IF host = 'localhost' OR host LIKE '%.localhost' THEN
        RETURN '127.0.0.1';
    END IF;
    parts := string_to_array(host, '.');
    n := coalesce(cardinality(parts), 0);
    IF n NOT BETWEEN 1 AND 4 THEN
        RETURN host;
    END IF;
    FOR i IN 1 .. n LOOP
        part := parts[i];
        IF part ~ '^0x[0-9a-f]*$' THEN
            digits := substring(part FROM 3);
            base := 16;
        ELSIF part ~ '^0[0-7]*$' THEN
            digits := part;
            base := 8;
        ELSIF part ~ '^[1-9][0-9]*$' THEN
            digits := part;
            base := 10;
        ELSE
            RETURN host;
        END IF;
        IF length(digits) > 12 THEN
            RETURN host; -- more than any part of an address can hold
        END IF;
        value := 0;
        FOR j IN 1 .. length(digits) LOOP
            value := value * base + (strpos('0123456789abcdef', substr(digits, j, 1)) - 1);
        END LOOP;
        IF i < n THEN
            IF value > 255 THEN
                RETURN host;
            END IF;
            addr := addr + value * 256 ^ (4 - i);
        ELSE
            IF value >= 256 ^ (5 - n) THEN
                RETURN host;
            END IF;
            addr := addr + value;
        END IF;
    END LOOP;
    RETURN host('0.0.0.0'::inet + addr::bigint);
END
$$;
-- +goose StatementEnd

-- The column is made again of the function: a generated column's
-- expression cannot be changed in place. One ALTER TABLE rewrites the
-- table under ACCESS EXCLUSIVE, which webhook_endpoints, at most 16 live
-- endpoints per tenant, makes a matter of milliseconds; no index uses the
-- column.
ALTER TABLE webhook_endpoints
    DROP COLUMN host,
    ADD COLUMN host text NOT NULL GENERATED ALWAYS AS (phasepay_canonical_host(url)) STORED;

-- +goose Down
ALTER TABLE webhook_endpoints
    DROP COLUMN host,
    ADD COLUMN host text NOT NULL GENERATED ALWAYS AS (
        lower(coalesce(substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://\[([^]/]*)\]'),
                       substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#:]*)'),
                       ''))
    ) STORED;
DROP FUNCTION phasepay_canonical_host(text);
