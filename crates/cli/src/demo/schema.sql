-- cardinal demo: the declarations the demo runs. The engine reads the
-- generated impressions once and folds every record into all four
-- summaries. `cardinal run schema.sql impressions.csv` runs the same.
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');

-- Reach by state by day: impressions, revenue and unique users.
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS impressions, sum(revenue) AS revenue, hll(user_id) AS users
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, state;

-- Each inventory provider by day: its audience and the revenue
-- distribution of its impressions.
CREATE SUMMARY providers AS
  SELECT date_trunc('day', ts) AS day, provider,
         count(*) AS impressions, hll(user_id) AS users,
         approx_quantile(revenue, 0.5, 0.9, 0.99) AS revenue
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, provider;

-- The ten most served sites of each day.
CREATE SUMMARY top_sites AS
  SELECT date_trunc('day', ts) AS day, count(*) AS impressions,
         topk(site, 10) AS sites
  FROM impressions WHERE kind = 'impression'
  GROUP BY day;

-- Each provider's audience over all days, in HyperLogLogs of 2^13
-- six-bit registers (6 KiB; postgresql-hll reads them): large enough that
-- intersecting two of them gives a useful interval.
CREATE SUMMARY audience AS
  SELECT provider, hll(user_id, 13, 6) AS users
  FROM impressions WHERE kind = 'impression'
  GROUP BY provider;

-- Which campaigns' clicks led to conversions: each user's clicks are kept
-- in a per-user chain; a conversion credits the clicks of the 30 days
-- before it, equally (linear), and frees the chain.
CREATE ATTRIBUTION credit ON impressions BY user_id MODEL linear LOOKBACK 30 DAYS
  TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
  VALUE revenue CAMPAIGN campaign SITE site;

-- Credit rolled up by campaign, like any other stream.
CREATE SUMMARY by_campaign AS
  SELECT campaign, sum(credit) AS conversions, sum(revenue) AS revenue,
         count(*) AS touches
  FROM credit
  GROUP BY campaign;
