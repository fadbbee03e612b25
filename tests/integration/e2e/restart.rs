pub async fn _y() {}
