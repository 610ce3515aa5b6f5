-- The continuous engine's snapshot benchmark: W1's stream, grouped by user
-- so that the state holds about a million groups (cardinal gen impressions'
-- default users), each with exact and HyperLogLog aggregates.
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');

CREATE SUMMARY per_user AS
  SELECT user_id, count(*) AS events, sum(revenue) AS revenue,
         max(revenue) AS top, hll(site) AS sites
  FROM impressions
  GROUP BY user_id;
