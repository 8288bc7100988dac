-- Revenue per arm: total, mean and sample standard deviation of the purchase
-- amount (amount is NULL on non-purchase rows, which the aggregates skip).
SELECT arm,
       count(amount) AS purchases,
       sum(amount) AS revenue,
       avg(amount) AS avg_amount,
       stddev_samp(amount) AS stddev_amount
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY arm
ORDER BY arm
