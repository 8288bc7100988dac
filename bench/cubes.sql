-- Cubes for the dashboard of bench/workload/dashboard (table abtest,
-- bench/sql/abtest.sql). Every chart filters one experiment and a day range
-- and groups by arm, so each cube keeps experiment_id, a time bucket and
-- arm, in that order: a part's rows are sorted by the dimensions, so the
-- experiment and then the range select a slice of each part. The rest is
-- what the charts group or filter by. Distinct users
-- are kept in one cube only, per day: a user's events of a day then sit in
-- one group (a user has one region and platform), which is what the exact
-- distinct counts cost in bytes.

-- 01 sample size, 02 conversion (purchasers: count(DISTINCT CASE WHEN
-- action = 'purchase' ...), a filter on the action dimension), 05 DAU,
-- 07 top regions, 08 platform split, 11 funnel.
CREATE CUBE ab_daily ON abtest
  DIMENSIONS (experiment_id, date_trunc('day', event_time) AS day, arm, action, region, platform)
  MEASURES (count(*) AS events, count(DISTINCT user_id) AS users);

-- 03 revenue, 06 daily revenue, 12 t-test inputs, 15 events per hour.
CREATE CUBE ab_hourly ON abtest
  DIMENSIONS (experiment_id, date_trunc('hour', event_time) AS hour, arm, action)
  MEASURES (count(*) AS events, count(amount) AS purchases, sum(amount) AS revenue,
            avg(amount) AS avg_amount, stddev_samp(amount) AS stddev_amount,
            sum(amount * amount) AS sum_sq_amount);

-- 09 feed traffic, 10 item-page traffic: the URL predicates are dimensions.
CREATE CUBE ab_urls ON abtest
  DIMENSIONS (experiment_id, date_trunc('day', event_time) AS day, arm,
              page_url LIKE '%src=feed%' AS from_feed, page_url LIKE '/item/%' AS item_page)
  MEASURES (count(*) AS events);

-- 04 spend vs. time on page (purchases: a filter on the action dimension).
CREATE CUBE ab_dwell ON abtest
  DIMENSIONS (experiment_id, date_trunc('day', event_time) AS day, arm, action)
  MEASURES (count(*) AS events,
            covar_samp(amount, CAST(dwell_ms AS DOUBLE PRECISION)) AS covar_amount_dwell,
            corr(amount, CAST(dwell_ms AS DOUBLE PRECISION)) AS corr_amount_dwell);

-- 13 and 14 (retention) group by user: no cube serves them.
