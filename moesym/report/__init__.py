"""What a user reads beyond a table: the HTML report and interactive page, the derivation pages and their plots, and the validation against measurements."""
